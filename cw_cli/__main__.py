from cw_cli.cli.app import console_main

console_main()
