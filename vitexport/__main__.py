from vitexport.cli.app import main

main()
