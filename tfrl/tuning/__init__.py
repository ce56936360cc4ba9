"""Hyperparameter tuning on Optuna (`tfrl tune`, tfrl.commands.tune): search spaces as data (spaces), the study in
its database (study), one trial through tfrl.train (trials), the report and the best preset (report), and one
process of the command from its checks to its report (session). Needs optuna: pip install 'tfrl[tune]'."""
