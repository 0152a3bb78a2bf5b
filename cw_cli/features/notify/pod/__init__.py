"""The notify feature's pod side: shipped flat beside cw's entrypoint, importing nothing of cw."""
