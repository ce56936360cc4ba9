"""Rollouts stepped in Ray actors (PyPI `ray`, extra `ray`): each actor holds its share of the envs and a NumPy
copy of the policy, so that the envs can run on other cores or machines than the learner."""
