"""CrossQ (Bhatt et al., ICLR 2024): SAC without target networks, with batch renormalization in the critics (and
the actor), the current and next state-actions normalized together in one pass. Acting, the replay, the
temperature and the export are SAC's (tfrl.agents.sac)."""
