"""``python -m simhpc``."""

from simhpc.cli import main

if __name__ == "__main__":
    main(prog_name="simhpc")
