from rubricrl.cli import main

main()
