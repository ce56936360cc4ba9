"""Whether a loaded SavedModel's variables are finite: TensorFlow and NumPy only, like the rest of the model server
(tfrl.models.serving uses it too)."""

from __future__ import annotations

import numpy as np
import tensorflow as tf


def non_finite_variable(loaded) -> str | None:
    """The name of a variable of a tf.saved_model.load result that holds NaN or Inf, None if all are finite.

    Walks every object the SavedModel tracks, so it covers SavedModels made elsewhere too (tfrl.models.export refuses to
    write such a one, but an older tfrl did, or the files were changed)."""
    variables = {id(t): t for t in tf.train.TrackableView(loaded).descendants() if isinstance(t, tf.Variable)}
    for variable in variables.values():
        if variable.dtype.is_floating and not np.isfinite(variable.numpy()).all():
            return variable.name.removesuffix(":0")
    return None
