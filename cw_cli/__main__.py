from cw_cli.cli.app import main

main()
