"""python -m tfrl <command> [flags]: the `tfrl` command (tfrl.commands)."""

from tfrl.commands import main

if __name__ == "__main__":
    main()
