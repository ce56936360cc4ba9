"""`tfrl doctor` from a checkout: python scripts/doctor.py --help (the command is tfrl.commands.doctor)."""

from tfrl.commands import doctor

if __name__ == "__main__":
    doctor.run()
