"""TensorFlow's process-wide state: visible devices and placement, memory, threads, precision, XLA and its
defaults, tf.distribute strategies, CPU features, TF's log filtering, and the doctor that checks them.

May import tfrl's top-level vocabulary (errors, lazy_import); never an agent, a run or an env.
"""
