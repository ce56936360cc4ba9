"""A2C: synchronous advantage actor-critic (Mnih et al. 2016, "Asynchronous Methods for Deep RL", synchronous variant)."""
