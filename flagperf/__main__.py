from flagperf.cli import main

main()
