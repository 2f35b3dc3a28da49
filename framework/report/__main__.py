from framework.report import main

main()
