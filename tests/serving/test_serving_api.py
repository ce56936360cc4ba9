"""TF Serving's REST API over real HTTP on loopback: every endpoint and format, and every bad input's status code.

Two servers: the hand-computable "half" SavedModel (tests/serving_helpers.py; versions 1 and 2,
labels stable=1 and canary=2) and a SavedModel made by plain Keras `model.export()` with two inputs
of different dtypes and two outputs. After each bad request the server must still answer correctly.
"""

import ast
import json
import pathlib
import random

import keras
import numpy as np
import pytest

pytest.importorskip("uvicorn", reason="the serve extra (uvicorn) is not installed: pip install -e '.[serve]'")
from serving_helpers import Client, metric_value, running_server, save_half_model
from tfrl.model_server.options import ServerOptions

LIMIT_BYTES = 4096


@pytest.fixture(scope="module")
def half(tmp_path_factory):
    """A client of a server of the "half" model, versions 1 and 2 (latest: 2)."""
    base_path = tmp_path_factory.mktemp("half") / "half"
    for version in (1, 2):
        save_half_model(base_path / str(version))
    options = ServerOptions(model_name="half", model_base_path=base_path, version_labels={"stable": 1, "canary": 2},
                            max_request_bytes=LIMIT_BYTES, file_system_poll_wait_seconds=0)
    with running_server(options) as (port, app):
        client = Client(port)
        yield client
        client.close()


@pytest.fixture(scope="module")
def keras_export(tmp_path_factory):
    """(client, model) of a server of a plain keras `model.export()`: inputs a float32 [-1, 3], b int32 [-1, 2]."""
    keras.utils.set_random_seed(3)
    a = keras.Input((3,), name="a", dtype="float32")
    b = keras.Input((2,), name="b", dtype="int32")
    hidden = keras.layers.Dense(5, activation="tanh")(keras.layers.Concatenate()([a, keras.ops.cast(b, "float32")]))
    model = keras.Model({"a": a, "b": b}, {"score": keras.layers.Dense(1)(hidden),
                                           "probs": keras.layers.Dense(4, activation="softmax")(hidden)})
    base_path = tmp_path_factory.mktemp("keras") / "scorer"
    model.export(str(base_path / "7"), verbose=False)
    with running_server(ServerOptions(model_name="scorer", model_base_path=base_path,
                                      file_system_poll_wait_seconds=0)) as (port, _):
        client = Client(port)
        yield client, model
        client.close()


def test_the_model_server_imports_no_agent_code():
    """The tfrl modules tfrl.model_server and tfrl-serve (tfrl.commands.serve) import, followed transitively: no agent,
    no Keras, only TF and the SavedModel."""
    repo = pathlib.Path(__file__).resolve().parents[2]

    def source(module):
        path = repo / (module.replace(".", "/") + ".py")
        return path if path.exists() else repo / module.replace(".", "/") / "__init__.py"

    seen, imported = set(), set()
    todo = ["tfrl.commands.serve", *(f"tfrl.model_server.{p.stem}" for p in (repo / "tfrl/model_server").glob("*.py"))]
    while todo:
        module = todo.pop()
        if module in seen or not source(module).exists():
            continue
        seen.add(module)
        for node in ast.walk(ast.parse(source(module).read_text())):
            if isinstance(node, ast.Import):
                names = [alias.name for alias in node.names]
            elif isinstance(node, ast.ImportFrom) and node.module:
                names = [node.module] + [f"{node.module}.{alias.name}" for alias in node.names]
            else:
                continue
            imported.update(names)
            todo += [name for name in names if name.startswith("tfrl")]
    assert "tfrl.model_server.versions" in seen and "tfrl.cli" in seen  # the walk followed the imports
    assert not [m for m in seen if m.startswith(("tfrl.agents", "tfrl.models.export", "tfrl.models.networks", "tfrl.run.runs"))]
    assert not [name for name in imported if name.split(".")[0] == "keras"]


def _assert_still_serving(client: Client) -> None:
    assert client.predict("half", {"instances": [[1.0, 2.0]]}) == (200, {"predictions": [[3.5, 4.0]]})


# -- model status and metadata -------------------------------------------------------------------------------------
def test_model_status_of_all_versions_one_version_and_a_label(half):
    def entry(version):
        return {"version": str(version), "state": "AVAILABLE", "status": {"error_code": "OK", "error_message": ""}}

    assert half.get("/v1/models/half") == (200, {"model_version_status": [entry(2), entry(1)]})
    assert half.get("/v1/models/half/versions/1") == (200, {"model_version_status": [entry(1)]})
    assert half.get("/v1/models/half/labels/canary") == (200, {"model_version_status": [entry(2)]})


def test_metadata_is_the_signature_def_map_as_tf_serving_prints_it(half):
    status, metadata = half.get("/v1/models/half/versions/1/metadata")
    assert status == 200
    assert metadata["model_spec"] == {"name": "half", "signature_name": "", "version": "1"}
    signature_defs = metadata["metadata"]["signature_def"]["signature_def"]
    assert {"serving_default", "scale_and_count", "strings", "flip"} <= set(signature_defs)
    serving_default = signature_defs["serving_default"]
    assert serving_default["method_name"] == "tensorflow/serving/predict"
    x = serving_default["inputs"]["x"]
    assert x["dtype"] == "DT_FLOAT" and x["name"] == "serving_default_x:0"
    assert x["tensor_shape"] == {"dim": [{"size": "-1", "name": ""}, {"size": "2", "name": ""}],
                                 "unknown_rank": False}
    assert signature_defs["scale_and_count"]["outputs"]["k_squared"]["dtype"] == "DT_INT32"
    assert half.get("/v1/models/half/metadata")[1]["model_spec"]["version"] == "2"  # the latest
    assert half.get("/v1/models/half/labels/stable/metadata")[1]["model_spec"]["version"] == "1"


# -- predict: formats ---------------------------------------------------------------------------------------------
def test_row_and_columnar_formats_with_one_input_and_one_output(half):
    # version 2: y = 0.5 * x + 3
    assert half.predict("half", {"instances": [[1.0, 2.0], [3.0, 4.0]]}) == (
        200, {"predictions": [[3.5, 4.0], [4.5, 5.0]]})
    assert half.predict("half", {"signature_name": "serving_default", "inputs": [[3.0, 4.0]]}) == (
        200, {"outputs": [[4.5, 5.0]]})
    assert half.predict("half", {"instances": [{"x": [1.0, 2.0]}]}) == (200, {"predictions": [[3.5, 4.0]]})
    assert half.predict("half", {"inputs": {"x": [[1, 2]]}}) == (200, {"outputs": [[3.5, 4.0]]})  # ints are numbers


def test_versions_and_labels_route_to_their_version(half):
    # version 1: y = 0.5 * x + 2
    assert half.predict("half", {"instances": [[1.0, 2.0]]}, "/versions/1") == (200, {"predictions": [[2.5, 3.0]]})
    assert half.predict("half", {"instances": [[1.0, 2.0]]}, "/labels/stable") == (200, {"predictions": [[2.5, 3.0]]})
    assert half.predict("half", {"instances": [[1.0, 2.0]]}, "/labels/canary") == (200, {"predictions": [[3.5, 4.0]]})
    assert half.predict("half", {"instances": [[1.0, 2.0]]}, "/versions/2") == (200, {"predictions": [[3.5, 4.0]]})


def test_several_inputs_and_outputs_in_both_formats(half):
    # x = [[1, 2], [3, 4]], k = [2, 3]: scaled = x * k = [[2, 4], [9, 12]], total = sum(x) + k = [5, 10], k*k = [4, 9]
    status, body = half.predict("half", {"signature_name": "scale_and_count", "instances": [
        {"x": [1.0, 2.0], "k": 2}, {"x": [3.0, 4.0], "k": 3}]})
    assert status == 200
    assert body == {"predictions": [{"scaled": [2.0, 4.0], "total": 5.0, "k_squared": 4},
                                    {"scaled": [9.0, 12.0], "total": 10.0, "k_squared": 9}]}
    status, body = half.predict("half", {"signature_name": "scale_and_count",
                                         "inputs": {"x": [[1.0, 2.0], [3.0, 4.0]], "k": [2, 3]}})
    assert status == 200
    assert body == {"outputs": {"scaled": [[2.0, 4.0], [9.0, 12.0]], "total": [5.0, 10.0], "k_squared": [4, 9]}}


def test_strings_with_b64_and_booleans(half):
    status, body = half.predict("half", {"signature_name": "strings",
                                         "instances": ["héllo", {"b64": "AAEC"}]})  # AAEC = bytes 0, 1, 2
    assert status == 200
    # "héllo" is 6 UTF-8 bytes; outputs named *_bytes come back base64-encoded
    assert body == {"predictions": [{"length": 6, "echo_bytes": {"b64": "aMOpbGxv"}},
                                    {"length": 3, "echo_bytes": {"b64": "AAEC"}}]}
    assert half.predict("half", {"signature_name": "flip", "inputs": [[True, False, True]]}) == (
        200, {"outputs": [[False, True, False]]})


def test_a_plain_keras_export_with_two_inputs_of_two_dtypes(keras_export):
    client, model = keras_export
    a = np.array([[0.5, -1.0, 2.0], [0.0, 0.25, -0.75]], np.float32)
    b = np.array([[1, -2], [3, 0]], np.int32)
    expected = {name: value.numpy() if hasattr(value, "numpy") else np.asarray(value)
                for name, value in model({"a": a, "b": b}).items()}
    status, body = client.predict("scorer", {"instances": [{"a": a[i].tolist(), "b": b[i].tolist()} for i in (0, 1)]})
    assert status == 200 and len(body["predictions"]) == 2
    for i, row in enumerate(body["predictions"]):
        assert set(row) == {"score", "probs"}
        np.testing.assert_allclose(row["score"], expected["score"][i], rtol=1e-5, atol=1e-6)
        np.testing.assert_allclose(row["probs"], expected["probs"][i], rtol=1e-5, atol=1e-6)
    status, body = client.predict("scorer", {"inputs": {"a": a.tolist(), "b": b.tolist()}})
    assert status == 200
    np.testing.assert_allclose(body["outputs"]["probs"], expected["probs"], rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(body["outputs"]["score"], expected["score"], rtol=1e-5, atol=1e-6)
    status, body = client.predict("scorer", {"inputs": {"a": a.tolist(), "b": (b + 0.5).tolist()}})
    assert status == 400 and "'b' is not of expected type int32" in body["error"]
    # Inputs of other row counts: one line saying so (it was TensorFlow's "Graph execution error" dump).
    status, body = client.predict("scorer", {"inputs": {"a": a.tolist(), "b": b[:1].tolist()}})
    assert (status, body["error"]) == (400, "'inputs': the inputs have different numbers of rows ('a': 2, 'b': 1); "
                                            "every input of a request has one row per observation")
    # A key given twice: refused, where json kept the last one without a word.
    status, body = client.request("POST", "/v1/models/scorer:predict",
                                  '{"inputs": {"a": %s, "b": %s, "b": %s}}' % (a.tolist(), b.tolist(), b.tolist()))
    assert (status, body["error"]) == (400, "JSON Parse error: the key 'b' appears twice in one object")
    status, body = client.get("/v1/models/scorer/metadata")
    inputs = body["metadata"]["signature_def"]["signature_def"]["serving_default"]["inputs"]
    assert status == 200 and {inputs["a"]["dtype"], inputs["b"]["dtype"]} == {"DT_FLOAT", "DT_INT32"}


# -- bad input: each gets its code, and the server keeps answering ---------------------------------------------------
BAD_PREDICTS = [
    # (path suffix, body, status, a phrase of the error)
    ("", b"instances = [1, 2]", 400, "JSON Parse error"),
    ("", b"", 400, "The document is empty"),
    ("", b"\xff\xfe\x00garbage", 400, "JSON Parse error"),
    ("", b"[[1.0, 2.0]]", 400, "must be a JSON object"),
    ("", {"instances": [[1.0, 2.0]], "inputs": [[1.0, 2.0]]}, 400, "not both"),
    ("", {"signature_name": "serving_default"}, 400, "missing 'instances'"),
    ("", {"instances": []}, 400, "'instances' is empty"),
    ("", {"instances": [[1.0, 2.0, 3.0]]}, 400, "has shape [1, 3] but the signature takes [-1, 2]"),
    ("", {"instances": [1.0, 2.0]}, 400, "has shape [2]"),
    ("", {"inputs": [[1.0, 2.0], [3.0]]}, 400, "ragged"),
    ("", {"instances": [["1.0", "2.0"]]}, 400, "not of expected type float32: got strings"),
    ("", {"instances": [[True, 2.0]]}, 400, "booleans among numbers"),
    ("", {"instances": [[None, 2.0]]}, 400, "not of expected type float32"),
    ("", {"instances": [[1.0, {"x": 1}]]}, 400, "not of expected type float32"),
    ("", b'{"instances": [[NaN, 2.0]]}', 400, "NaN or Infinity"),
    ("", b'{"instances": [[1.0, -Infinity]]}', 400, "NaN or Infinity"),
    ("", {"instances": [[1e39, 2.0]]}, 400, "beyond float32's range"),
    ("", {"signature_name": "scale_and_count", "inputs": {"x": [[1.0, 2.0]], "k": [1.5]}}, 400,
     "not of expected type int32: got non-integer numbers"),
    ("", {"signature_name": "scale_and_count", "inputs": {"x": [[1.0, 2.0]], "k": [2 ** 31]}}, 400,
     "outside int32's range"),
    ("", {"signature_name": "scale_and_count", "instances": [{"x": [1.0, 2.0]}]}, 400, "missing input(s) k"),
    ("", {"signature_name": "scale_and_count", "instances": [[1.0, 2.0]]}, 400, "keyed by input name"),
    ("", {"signature_name": "scale_and_count", "inputs": {"x": [[1.0, 2.0]], "k": [1], "z": [1]}}, 400,
     "unknown input(s) z"),
    ("", {"signature_name": "strings", "instances": [1]}, 400, "not of expected type string"),
    ("", {"signature_name": "strings", "instances": [{"b64": "%%%"}]}, 400, "invalid base64"),
    ("", {"signature_name": "flip", "inputs": [[1, 0, 1]]}, 400, "not of expected type bool"),
    ("", {"signature_name": 7, "instances": [[1.0, 2.0]]}, 400, "'signature_name' key must be a string"),
    ("", {"signature_name": "nope", "instances": [[1.0, 2.0]]}, 404, 'Serving signature name: "nope" not found'),
    ("/versions/9", {"instances": [[1.0, 2.0]]}, 404, "Servable not found for request: Specific(half, 9)"),
    ("/versions/x1", {"instances": [[1.0, 2.0]]}, 400, "Malformed request"),
    ("/versions/99999999999999999999", {"instances": [[1.0, 2.0]]}, 400, "int64"),
    ("/labels/beta", {"instances": [[1.0, 2.0]]}, 404, "Unrecognized servable version label: beta"),
]


@pytest.mark.parametrize("suffix, body, status, phrase", BAD_PREDICTS, ids=[p[3][:40] for p in BAD_PREDICTS])
def test_each_bad_predict_gets_its_code_and_the_server_keeps_answering(half, suffix, body, status, phrase):
    got_status, got_body = half.predict("half", body, suffix)
    assert got_status == status, got_body
    assert set(got_body) == {"error"} and phrase in got_body["error"], got_body
    _assert_still_serving(half)


@pytest.mark.parametrize("method, path, status, phrase", [
    ("POST", "/v1/models/nope:predict", 404, "Servable not found for request: Latest(nope)"),
    ("GET", "/v1/models/nope", 404, "Could not find any versions of model nope"),
    ("GET", "/v1/models/half/versions/5", 404, "Could not find version 5 of model half"),
    ("GET", "/v1/models/half/labels/beta/metadata", 404, "Unrecognized servable version label"),
    ("GET", "/v1/models/half:predict", 400, "Malformed request: GET"),
    ("POST", "/v1/models/half", 400, "Malformed request: POST"),
    ("POST", "/v1/models/half/metadata", 400, "Malformed request"),
    ("GET", "/v1/models", 400, "Malformed request"),
    ("POST", "/v1/models/half:classify", 501, "not implemented"),
    ("GET", "/index.html", 404, "Not found"),
])
def test_bad_urls_and_methods(half, method, path, status, phrase):
    got_status, got_body = half.request(method, path, b"{}" if method == "POST" else None)
    assert got_status == status and phrase in got_body["error"], (got_status, got_body)
    _assert_still_serving(half)


def test_a_body_over_the_limit_is_413_by_content_length_or_by_its_chunks(half):
    big = json.dumps({"instances": [[1.0, 2.0]] * 500}).encode()  # ~6 kB > 4096
    status, body = half.predict("half", big)
    assert status == 413 and "over the limit of 4096 bytes" in body["error"]
    chunks = (big[i:i + 1000] for i in range(0, len(big), 1000))  # chunked: no Content-Length to refuse early
    status, body = half.request("POST", "/v1/models/half:predict", chunks)  # http.client sends it chunked
    assert status == 413 and "over the limit" in body["error"]
    _assert_still_serving(half)


def test_fuzzed_bodies_never_break_the_server(half):
    """200 malformed or random bodies (fixed seed): each answered 200/400/404 with JSON, never a 5xx or a hang."""
    rng = random.Random(20240)
    valid = [b'{"instances": [[1.0, 2.0]]}', b'{"inputs": {"x": [[1, 2]]}}',
             b'{"signature_name": "scale_and_count", "instances": [{"x": [1, 2], "k": 3}]}',
             b'{"signature_name": "strings", "inputs": ["a", {"b64": "AA=="}]}']
    atoms = ["1", "-0.5", "1e400", "NaN", "Infinity", "true", "null", '"x"', '{"b64": "AA=="}', "[]", "{}",
             '"serving_default"', '"scale_and_count"', "[[1, 2]]", "[1, [2]]", '{"x": [[1, 2]], "k": [1]}']
    keys = ["instances", "inputs", "signature_name", "x", "k", "text", "flags", ""]

    def random_json(depth=0):
        roll = rng.random()
        if depth > 3 or roll < 0.4:
            return rng.choice(atoms)
        if roll < 0.7:
            return "[" + ", ".join(random_json(depth + 1) for _ in range(rng.randint(0, 3))) + "]"
        return "{" + ", ".join(f'"{rng.choice(keys)}": {random_json(depth + 1)}' for _ in range(rng.randint(0, 3))) + "}"

    def body():
        kind = rng.randrange(5)
        base = bytearray(rng.choice(valid))
        if kind == 0:  # flipped bytes
            for _ in range(rng.randint(1, 4)):
                base[rng.randrange(len(base))] = rng.randrange(256)
            return bytes(base)
        if kind == 1:  # truncated
            return bytes(base[:rng.randrange(len(base))])
        if kind == 2:  # random bytes
            return bytes(rng.randrange(256) for _ in range(rng.randint(0, 64)))
        if kind == 3:  # deep nesting
            depth = rng.choice([50, 500, 2000])  # 2000: deeper than json.loads recurses
            return (b'{"instances": ' + b"[" * depth + b"1" + b"]" * depth + b"}")
        return ('{"' + rng.choice(keys[:3]) + '": ' + random_json() + "}").encode()

    statuses = []
    for _ in range(200):
        status, answer = half.predict("half", body())
        statuses.append(status)
        assert status in (200, 400, 404), (status, answer)
        assert isinstance(answer, dict) and (("error" in answer) != (status == 200)), answer
    assert statuses.count(400) > 100  # the fuzz mostly hit the checks, not the happy path
    _assert_still_serving(half)
    metrics = half.get("/monitoring/prometheus/metrics")[1]
    assert metric_value(metrics, ':tensorflow:serving:request_count{model_name="half",API="predict",status="INTERNAL"}') == 0


def test_metrics_count_requests_and_errors(half):
    prefix = ':tensorflow:serving:request_count{model_name="half",API="predict",status='
    before = half.get("/monitoring/prometheus/metrics")[1]
    half.predict("half", {"instances": [[1.0, 2.0]]})
    half.predict("half", {"instances": []})
    status, after = half.get("/monitoring/prometheus/metrics")
    assert status == 200 and "# TYPE :tensorflow:serving:request_latency histogram" in after
    assert metric_value(after, prefix + '"OK"}') == metric_value(before, prefix + '"OK"}') + 1
    assert metric_value(after, prefix + '"INVALID_ARGUMENT"}') == metric_value(before, prefix + '"INVALID_ARGUMENT"}') + 1
    count = metric_value(after, ':tensorflow:serving:request_latency_count{model_name="half",API="predict"')
    assert count == metric_value(after, ':tensorflow:serving:request_latency_bucket{model_name="half",API="predict",'
                                        'entrypoint="REST",le="+Inf"}') > 0


def test_non_finite_inputs_pass_when_allowed_as_tf_serving_does(tmp_path):
    """--allow_non_finite_inputs: NaN and out-of-range numbers reach the model (as inf), and come back as JSON NaN."""
    import tensorflow as tf

    from tfrl.model_server.signatures import load_signatures

    signature = load_signatures(tf.saved_model.load(str(save_half_model(tmp_path / "1"))))["serving_default"]
    request = signature.parse_request(json.loads('{"instances": [[NaN, 1e39]]}'), allow_non_finite=True)
    assert request.inputs["x"].dtype == np.float32
    np.testing.assert_array_equal(request.inputs["x"], [[np.nan, np.inf]])
    answer = signature.response(signature(request.inputs), request.row_format)
    assert json.dumps(answer) == '{"predictions": [[NaN, Infinity]]}'  # 0.5 * x + 2
