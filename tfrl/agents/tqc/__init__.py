"""TQC (Kuznetsov et al. 2020): SAC with distributional critics whose pooled target quantiles are truncated.
Acting, the replay, the actor, the temperature and the export are SAC's (tfrl.agents.sac)."""
