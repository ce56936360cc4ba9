"""Keras building blocks shared by the agents and their NumPy mirrors, observation normalization and running
statistics, the NaN guard (numerics), the policy's inputs and memory, export as a SavedModel, the policy loader
(serving) and the portable LiteRT/ONNX files.

May import tfrl's top-level vocabulary and tfrl.envs' observation specs; never an agent or a run.
"""
