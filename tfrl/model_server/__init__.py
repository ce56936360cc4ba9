"""A TensorFlow Serving-compatible REST model server for any SavedModel in TF Serving's layout.

    python scripts/serve.py --model_name=lunar --model_base_path=saved_models/lunar

serves <model_base_path>/<integer version>/ SavedModels over TF Serving's REST API
(`/v1/models/NAME[/versions/N|/labels/L][:predict|/metadata]`), so a client written
for TF Serving works unchanged. It loads only TensorFlow and the SavedModel:
never tfrl's agents. The modules, from the wire inwards:

    main.py        the tfrl-serve program (scripts/serve.py): flags, then uvicorn on a listening socket
    base_path.py   start-up checks of --model_base_path (a version, run or models directory: names the right one)
    server.py      putting it together: the app after its first scan, the socket, the uvicorn server
    connections.py the connection budget against slow or many clients (slowloris), in uvicorn's protocol class
    app.py         the ASGI app (run by uvicorn): routes, body limit, status codes, one log line per request
    signatures.py  one signature of a loaded SavedModel: JSON request -> checked NumPy inputs, outputs -> JSON
    batching.py    dynamic batching: concurrent requests' rows merged into one model call, split back
    versions.py    the version manager: polls the base path, loads off the request path, swaps, reports status
    metrics.py     request counts, errors, latency and batch sizes in Prometheus' text format
    errors.py      ServingError: a TF Serving error code, its HTTP status and a message
    options.py     ServerOptions, the server's settings (TF Serving's flag names)
"""
