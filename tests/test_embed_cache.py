"""The model graph memsafe hands onnxruntime (`embed.without_nan_guards`) and the optimised graph it
caches on disk (`embed._session`). Tiny ONNX models are built here with protobuf
(onnxruntime's own dependency) and a subset of ONNX's schema, since `onnx` is no dependency."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
import time

import numpy as np
import onnxruntime as ort
import pytest

from memsafe import embed


def _onnx():
    """Message classes of the part of onnx/onnx.proto (field numbers as there) a runnable model needs."""
    from google.protobuf import descriptor_pb2, descriptor_pool, message_factory

    field = descriptor_pb2.FieldDescriptorProto
    many, one = field.LABEL_REPEATED, field.LABEL_OPTIONAL
    kinds = {
        "OperatorSetIdProto": [("domain", 1, one, field.TYPE_STRING), ("version", 2, one, field.TYPE_INT64)],
        "Dimension": [("dim_value", 1, one, field.TYPE_INT64)],
        "TensorShapeProto": [("dim", 1, many, "Dimension")],
        "TensorType": [("elem_type", 1, one, field.TYPE_INT32), ("shape", 2, one, "TensorShapeProto")],
        "TypeProto": [("tensor_type", 1, one, "TensorType")],
        "ValueInfoProto": [("name", 1, one, field.TYPE_STRING), ("type", 2, one, "TypeProto")],
        "TensorProto": [("dims", 1, many, field.TYPE_INT64), ("data_type", 2, one, field.TYPE_INT32),
                        ("float_data", 4, many, field.TYPE_FLOAT), ("int32_data", 5, many, field.TYPE_INT32),
                        ("name", 8, one, field.TYPE_STRING)],
        "AttributeProto": [("name", 1, one, field.TYPE_STRING), ("i", 3, one, field.TYPE_INT64),
                           ("g", 6, one, "GraphProto"), ("type", 20, one, field.TYPE_INT32)],
        "NodeProto": [("input", 1, many, field.TYPE_STRING), ("output", 2, many, field.TYPE_STRING),
                      ("op_type", 4, one, field.TYPE_STRING), ("attribute", 5, many, "AttributeProto")],
        "GraphProto": [("node", 1, many, "NodeProto"), ("name", 2, one, field.TYPE_STRING),
                       ("initializer", 5, many, "TensorProto"), ("input", 11, many, "ValueInfoProto"),
                       ("output", 12, many, "ValueInfoProto")],
        "ModelProto": [("ir_version", 1, one, field.TYPE_INT64), ("graph", 7, one, "GraphProto"),
                       ("opset_import", 8, many, "OperatorSetIdProto")],
    }
    schema = descriptor_pb2.FileDescriptorProto(name="test_onnx.proto", package="test_onnx")
    for name, fields in kinds.items():
        kind = schema.message_type.add(name=name)
        for field_name, number, label, of in fields:
            if of in kinds:
                kind.field.add(name=field_name, number=number, label=label, type=field.TYPE_MESSAGE,
                               type_name=f".test_onnx.{of}")
            else:
                kind.field.add(name=field_name, number=number, label=label, type=of)
    pool = descriptor_pool.DescriptorPool()
    pool.Add(schema)
    return {name: message_factory.GetMessageClass(pool.FindMessageTypeByName(f"test_onnx.{name}")) for name in kinds}


FLOAT, BOOL = 1, 9  # TensorProto.DataType


def _model(nodes, outputs, initializers) -> bytes:
    """A model of X (float, 2x3) -> `outputs` (name -> element type); `nodes`: (op, inputs, outputs,
    attributes, subgraph of an If's branches or None)."""
    onnx = _onnx()

    def graph(name, node_list, outs, inputs=()):
        g = onnx["GraphProto"](name=name)
        for op, ins, outs_, attrs, branch in node_list:
            node = g.node.add(op_type=op, input=ins, output=outs_)
            for key, value in attrs.items():
                node.attribute.add(name=key, i=value, type=2)
            if branch is not None:
                for key in ("then_branch", "else_branch"):
                    node.attribute.add(name=key, g=graph(key, *branch), type=5)
        for value_name in inputs:
            g.input.add(name=value_name, type=onnx["TypeProto"](tensor_type=onnx["TensorType"](
                elem_type=FLOAT, shape=onnx["TensorShapeProto"](dim=[onnx["Dimension"](dim_value=2),
                                                                     onnx["Dimension"](dim_value=3)]))))
        for value_name, elem in outs.items():
            g.output.add(name=value_name, type=onnx["TypeProto"](tensor_type=onnx["TensorType"](elem_type=elem)))
        return g

    main = graph("g", nodes, outputs, inputs=["X"])
    for name, dims, values in initializers:
        if values and isinstance(values[0], bool):
            main.initializer.add(name=name, dims=dims, data_type=BOOL, int32_data=[int(v) for v in values])
        else:
            main.initializer.add(name=name, dims=dims, data_type=FLOAT, float_data=values)
    model = onnx["ModelProto"](ir_version=8, graph=main, opset_import=[onnx["OperatorSetIdProto"](version=17)])
    return model.SerializeToString()


def _guarded(p="p", extra_outputs=None, tail=("Relu", ["w"], ["Y"], {}, None)):
    """Softmax(X) -> p; Where(IsNaN(p), c, p) -> w; then `tail`."""
    return [("Softmax", ["X"], ["p"], {"axis": -1}, None), ("IsNaN", [p], ["n"], {}, None),
            ("Where", ["n", "c", p], ["w"], {}, None), tail]


ZERO = ("c", [], [0.0])
CASES = {
    "a softmax guard goes": (_guarded(), {"Y": FLOAT}, [ZERO], 1),
    "a guard on a value that is not a softmax's stays": (
        [("IsNaN", ["X"], ["n"], {}, None), ("Where", ["n", "c", "X"], ["w"], {}, None),
         ("Relu", ["w"], ["Y"], {}, None)], {"Y": FLOAT}, [ZERO], 0),
    "an IsNaN read by the graph's outputs stays": (_guarded(), {"Y": FLOAT, "n": BOOL}, [ZERO], 0),
    "a c that broadcasts the output to a larger shape stays": (_guarded(), {"Y": FLOAT},
                                                                [("c", [4, 2, 3], [0.0] * 24)], 0),
    "a Where read by a subgraph stays": (
        _guarded(tail=("If", ["cond"], ["Y"], {}, ([("Relu", ["w"], ["t"], {}, None)], {"t": FLOAT}))),
        {"Y": FLOAT}, [ZERO, ("cond", [], [True])], 0),
}


@pytest.mark.parametrize("case", list(CASES))
def test_only_the_softmax_guards_that_cannot_change_the_outputs_go(case):
    """`without_nan_guards` took any `Where(IsNaN(x), c, x)` out: a guard on a value
    that holds a NaN (outputs changed), an IsNaN the graph outputs or a Where a subgraph reads
    (onnxruntime refused the graph: ModelUnavailable), a `c` that widens the output (another shape)."""
    nodes, outputs, initializers, removed = CASES[case]
    original = _model(nodes, outputs, initializers)
    lean = embed.without_nan_guards(original)
    ops = [n.op_type for n in embed._onnx_subset().FromString(lean).graph.node]
    assert ops.count("IsNaN") == 1 - removed
    clean = np.array([[1.0, 2.0, 3.0], [4.0, 5.0, 6.0]], dtype=np.float32)
    inputs = [clean] if removed else [clean, np.where(clean == 2.0, np.nan, clean).astype(np.float32)]
    for x in inputs:  # a guard that goes never sees a NaN (a BERT row attends to [CLS]); one that stays may
        want = ort.InferenceSession(original, providers=["CPUExecutionProvider"]).run(None, {"X": x})
        got = ort.InferenceSession(lean, providers=["CPUExecutionProvider"]).run(None, {"X": x})
        for a, b in zip(want, got, strict=True):
            assert a.shape == b.shape and np.array_equal(a, b, equal_nan=True)


@pytest.mark.parametrize("content", [b"", b"not an onnx model\n", "head"])
def test_a_broken_model_file_is_reported_in_onnxruntime_s_words(tmp_path, monkeypatch, content):
    """An empty, non-ONNX or truncated model.onnx: ModelUnavailable (lexical fallback) with
    onnxruntime's reason, not the name of memsafe's internal protobuf subset."""
    model, tokenizer = embed.model_files()
    monkeypatch.setenv("MEMSAFE_CACHE_DIR", str(tmp_path / "cache"))
    (tmp_path / "m").mkdir()
    (tmp_path / "m" / "model.onnx").write_bytes(model.read_bytes()[:5_000_000] if content == "head" else content)
    with pytest.raises(embed.ModelUnavailable) as info:
        embed.Embedder(tmp_path / "m" / "model.onnx", tokenizer)
    assert "memsafe_onnx" not in str(info.value) and "ONNXRuntimeError" in str(info.value)


@pytest.mark.skipif(not hasattr(os, "setrlimit") and sys.platform != "linux", reason="RLIMIT_FSIZE is POSIX")
def test_a_cache_that_cannot_be_written_leaves_the_model_working(tmp_path):
    """A full disk (here: a file size limit, which applies to root too) while the optimised graph
    is saved: onnxruntime raises its own error, not OSError, and the model was unavailable."""
    script = textwrap.dedent("""
        import resource, signal
        signal.signal(signal.SIGXFSZ, signal.SIG_IGN)
        resource.setrlimit(resource.RLIMIT_FSIZE, (1 << 20, 1 << 20))
        from memsafe import embed
        print(embed.Embedder(*embed.model_files()).embed(["hello"]).shape)
    """)
    run = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=300,
                         env={**os.environ, "MEMSAFE_CACHE_DIR": str(tmp_path / "cache")})
    assert run.returncode == 0 and run.stdout.strip() == "(1, 384)", run.stderr
    assert not list((tmp_path / "cache").iterdir())  # nothing half-written left


def test_two_installations_sharing_the_cache_keep_both_graphs(tmp_path, monkeypatch):
    """Two models of one file name (or two onnxruntime versions) used in turn: each run removed
    the other's graph, so every run rebuilt its own."""
    model, tokenizer = embed.model_files()
    monkeypatch.setenv("MEMSAFE_CACHE_DIR", str(tmp_path / "cache"))
    copy = tmp_path / "other" / "model.onnx"
    copy.parent.mkdir()
    copy.write_bytes(model.read_bytes())  # another mtime: another key
    embed.Embedder(model, tokenizer)
    first = embed._optimized_path(model, ort)
    built = (first / "model.data").stat().st_ino
    embed.Embedder(copy, tokenizer)
    embed.Embedder(model, tokenizer)
    assert (first / "model.data").stat().st_ino == built  # loaded, not built again
    assert embed._optimized_path(copy, ort).is_dir()


def test_stale_caches_and_killed_builds_are_removed(tmp_path):
    """When a graph is written: other keys' graphs that nobody loaded for STALE_CACHE_SECONDS go,
    recent ones stay; the single-file layout of before goes; the temporary folder of a build that
    was killed goes once it is DEAD_BUILD_SECONDS old, a young one (a build under way) stays."""
    now = time.time()

    def made(name, age, is_dir=True):
        path = tmp_path / name
        if is_dir:
            path.mkdir()
            (path / "model.data").write_bytes(b"w")
        else:
            path.write_bytes(b"old")
        os.utime(path, (now - age, now - age))
        return path

    current = made("model-aaaa", 0)
    stale = made("model-bbbb", embed.STALE_CACHE_SECONDS + 60)
    recent = made("model-cccc", embed.STALE_CACHE_SECONDS - 3600)
    single = made("model-dddd.onnx", 0, is_dir=False)
    dead = made(".model-eeee.1.2.tmp", embed.DEAD_BUILD_SECONDS + 60)
    building = made(".model-ffff.3.4.tmp", 10)
    other = made("othermodel-gggg", embed.STALE_CACHE_SECONDS + 60)
    embed._remove_stale_caches(current, "model")
    assert [p.exists() for p in (current, stale, recent, single, dead, building, other)] == [
        True, False, True, False, False, True, True]
