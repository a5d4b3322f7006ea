import sys

if __name__ == "__main__":  # a spawned child process re-imports this module: no side effects then
    from bench.run import main

    sys.exit(main())
