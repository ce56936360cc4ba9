"""A policy outside TensorFlow: LiteRT (policy.tflite) and ONNX (policy.onnx) beside the SavedModel.

    tfrl export --run_dir=runs/my-run --model_name=cartpole --format=saved_model,litert,onnx
    saved_models/cartpole/1/  saved_model.pb  variables/  assets.extra/  policy.tflite  policy.onnx

convert (needs TensorFlow, and tf2onnx for ONNX) writes the files from the SavedModel's `serving_default` and
checks them against it (parity); runtime (NumPy and ai-edge-litert or onnxruntime only) loads them:
tfrl.load_policy("saved_models/cartpole/1/policy.tflite") imports neither TensorFlow nor Keras.
"""
