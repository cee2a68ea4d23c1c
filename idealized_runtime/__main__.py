from idealized_runtime.cli import main

main()
