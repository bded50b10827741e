from memsafe.cli import main

main()
