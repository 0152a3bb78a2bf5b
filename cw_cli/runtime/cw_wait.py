# cw: the trainer's init container runs this (python3 -c) until a server answers; it gives up at
# the launch's services timeout, so a server that never answers ends the trainer (and, through
# the keeper, the servers) instead of holding GPUs forever. Arguments: URL, seconds.
import sys
import time
import urllib.request

url, deadline = sys.argv[1], time.monotonic() + float(sys.argv[2])
while True:
    try:
        urllib.request.urlopen(url, timeout=5)
        break
    except Exception as exc:
        if time.monotonic() > deadline:
            sys.exit(f'{url} did not answer within {sys.argv[2]} s: {exc}')
        print(f'waiting for {url}: {exc}', flush=True)
        time.sleep(5)
