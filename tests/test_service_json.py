"""The service's JSON readers (service.wire.loads, loads_extender_args) give what json.loads gives,
or raise what it raises, on the bodies that differ between JSON scanners; Node objects read
lazily give parse_node what the decoded objects give, and filter's echo (service.wire.dumps) is
the text received. In process: these are the readers' own contracts; the verbs over HTTP are
tests/test_service_k8s.py's and tests/test_extender_verbs.py's."""

from __future__ import annotations

import json

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from service import wire
from service.wire import WireError, dumps, loads, loads_extender_args, node_list

NODE = ('{"metadata":{"name":"gpu001","uid":"u1","labels":{"nvidia.com/gpu.product":"NVIDIA-H100-80GB-HBM3",'
        '"kubernetes.io/hostname":"gpu001"},"annotations":{"a":"b"}},"spec":{"taints":[]},'
        '"status":{"allocatable":{"nvidia.com/gpu":"8","cpu":"96"},"images":[{"names":["x"],"sizeBytes":1}]}}')

BODIES = [
    '{"Pod":{"metadata":{"name":"p"}},"Nodes":{"metadata":{},"items":[' + NODE + "]},\"NodeNames\":null}",
    '{"pod":{"metadata":{"name":"p"}},"nodes":{"Items":[' + NODE.replace('"metadata"', '"Metadata"').replace('"labels"', '"LABELS"') + "]}}",
    '{"Pod":{},"Nodes":[' + NODE + "]}",  # a bare list of nodes
    '{"Pod":{},"Nodes":{"items":[' + NODE + '],"items":[]}}',  # duplicate keys: the last wins
    '{"Pod":{},"Nodes":{"metadata":{},"items":[' + NODE + ',' + NODE.replace("gpu001", "gpu002") + "]}}",
    '{"Pod":{},"Nodes":{"items":[{"metadata":{"name":"a","name":"b"}}]}}',
    '{"Pod":{},"Nodes":{"items":[{"metadata":{"name":"a","Name":"b"}}]}}',
    '{"Pod":{},"Nodes":{"items":[{"metadata":{"Name":"b","labels":{"x":1}}}]}}',  # a label that is not a string
    '{"Pod":{},"Nodes":{"items":[{"metadata":"gpu001"}]}}',
    '{"Pod":{},"Nodes":{"items":["gpu001", 3, null]}}',
    '{"Pod":{},"Nodes":{"items":{"metadata":{}}}}',
    '{"Pod":{},"Nodes":"all"}',
    '{"Pod":{},"Nodes":null,"NodeNames":["a","b"]}',
    '{"Pod":{},"Nodes":{"items":[{"metadata":{"name":"a"},"status":{"allocatable":{"nvidia.com/gpu":NaN}}}]}}',
    '{"Pod":{},"Nodes":{"items":[{"metadata":{"name":"a"},"status":{"images":[1e400]}}]}}',  # inf where nobody reads
    '{"Pod":{},"Nodes":{"items":[{"metadata":{"name":"a"},"status":{"allocatable":{"nvidia.com/gpu":123456789012345678901234567890}}}]}}',
    '{"Pod":{},"Nodes":{"items":[{"metadata":{"name":"\\ud800"}}]}}',  # a lone surrogate: json.loads takes it
    '{"Pod":{},"Nodes":{"items":[{"metadata":{"name":"a"},"spec":{"x":"\\ud800"}}]}}',
    '{"Pod":{},"Nodes":{"items":[{"metadata":{"name":"a\tb"}}]}}',  # a raw control character: refused
    '{"Pod":{},"Nodes":{"items":[{"metadata":{"name":"a"},"spec":{"x":"a\x01b"}}]}}',
    '{"Pod":{},"Nodes":{"items":[{"metadata":{"name":"a"},"spec":' + "[" * 3000 + "]" * 3000 + "}]}}",
    '{"Pod":{},"Nodes":{"items":[]}} x',
    "[1, 2]", '"a string"', "", "   ", "{", "NaN", "null",
] + [  # nodes the typed scan of all nodes takes, or leaves to the lazy reader: the same either way
    '{"Pod":{},"Nodes":{"items":[' + NODE + "," + NODE.replace('"8"', gpus) + "]}}"
    for gpus in ('" 8"', '"08"', '"+8"', '"-2"', "8", "8.0", "8.5", '"65536"', '"65537"', '"99999"', '"\u0668"', "null",
                 '"8", "NVIDIA.COM/GPU": "4"', '"8", "nvidia.com/gpu": "2"', "true", '""')
] + [
    '{"Pod":{},"Nodes":{"items":[' + NODE + "," + NODE.replace(old, new, 1) + "]}}"
    for old, new in (('"labels":{', '"labels":{"n":1,'), ('"labels":{', '"Labels":{'), ('"metadata"', '"Metadata"'),
                     ('"name":"gpu001"', '"name":""'), ('"name":"gpu001"', '"name":7'), ('"allocatable"', '"Allocatable"'),
                     ('"allocatable":{', '"allocatable":{"x":[1,{"y":null}],'), ('"status":{', '"status":null,"x":{'),
                     ('"metadata":{', '"metadata":{"labels":null,'), ('"labels":{', '"labels":null,"l":{'),
                     ('"name":"gpu001"', '"name":"gpu001","name":"gpu009"'), ('"metadata":{', '"gangsched.io/raw-json":1,"metadata":{'),
                     ('"status":{"allocatable":{"nvidia.com/gpu":"8","cpu":"96"}', '"status":{"allocatable":[]'))
]
RAW = [b.encode() for b in BODIES] + [
    b'\xef\xbb\xbf{"Pod":{},"Nodes":{"items":[]}}',  # a UTF-8 byte order mark: json.loads takes it
    '{"Pod":{},"Nodes":{"items":[]}}'.encode("utf-16"),  # json.loads detects UTF-16 and UTF-32
    b'{"Pod":{},"Nodes":{"items":[{"metadata":{"name":"a"},"spec":{"x":"\xff"}}]}}',  # invalid UTF-8 where nobody reads
    b'{"Pod":{},"Nodes":{"items":[{"metadata":{"name":"a"},"spec":{"x":"\xc3\xa9"}}]}}',
]


def outcome(read, body: bytes):
    """('ok', the value as canonical JSON text) or ('error', the exception's type)."""
    try:
        value = read(body)
    except Exception as e:  # noqa: BLE001 - the type is what is compared
        return "error", type(e).__name__
    return "ok", json.dumps(value, sort_keys=True)


def nodes_outcome(args):
    """What the extender reads from ExtenderArgs' nodes: each node's name, labels, GPUs, type and
    echoed object, or the WireError message."""
    try:
        nodes, names = node_list(args, "ExtenderArgs")
    except WireError as e:
        return "error", str(e)
    if nodes is None:
        return "names", names
    return "nodes", [(n.name, n.labels, n.allocatable_gpus, n.gpu_type, json.loads(dumps(n.raw))) for n in nodes]


@pytest.mark.parametrize("body", RAW, ids=range(len(RAW)))
def test_the_readers_give_what_json_loads_gives(body):
    want = outcome(json.loads, body)
    assert outcome(loads, body) == want
    try:
        lazy = loads_extender_args(body)
        got = "ok", None
    except Exception as e:  # noqa: BLE001 - the type is what is compared
        got = "error", type(e).__name__
    assert got[0] == want[0] and (got[0] == "ok" or got == want), (got, want)
    if want[0] == "ok" and isinstance(json.loads(body), dict):  # the nodes as the extender reads them, the rest as decoded
        plain = json.loads(body)
        assert nodes_outcome(lazy) == nodes_outcome(plain)
        assert {k: v for k, v in lazy.items() if k.lower() != "nodes"} == {k: v for k, v in plain.items() if k.lower() != "nodes"}
    elif want[0] == "ok":
        assert outcome(loads_extender_args, body) == want


def test_filter_echoes_the_node_text_as_received():
    body = ('{"Pod":{},"Nodes":{"items":[' + NODE + "," + NODE.replace("gpu001", "gpu002") + "]}}").encode()
    nodes, _ = node_list(loads_extender_args(body), "ExtenderArgs")
    answer = {"Nodes": {"metadata": {}, "items": [n.raw for n in nodes]}, "NodeNames": None, "Error": ""}
    text = dumps(answer)
    if wire.msgspec is not None:  # the text itself, byte for byte
        assert all(isinstance(n.raw, wire.RawJSON) for n in nodes)
        assert NODE.encode() in text and NODE.replace("gpu001", "gpu002").encode() in text
    assert json.loads(text) == {"Nodes": {"metadata": {}, "items": [json.loads(NODE), json.loads(NODE.replace("gpu001", "gpu002"))]},
                                "NodeNames": None, "Error": ""}
    assert dumps({"a": [1, 2.5, "é", None]}) == json.dumps({"a": [1, 2.5, "é", None]}, separators=(",", ":")).encode()


JSON = st.recursive(st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False) | st.text(max_size=6),
                    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=6), inner, max_size=4),
                    max_leaves=20)


LABEL = st.text("abc./-", min_size=1, max_size=4) | st.sampled_from(["nvidia.com/gpu.product", "nvidia.com/gpu.count",
                                                                       "nvidia.com/gpu.memory", "Nvidia.com/gpu.count"])
VALUE = st.sampled_from(["8", "4", " 8", "-1", "NVIDIA-H100-80GB-HBM3", "NVIDIA-A100-SXM4-80GB", "81559", "x"]) | st.integers(-2, 9)


@settings(max_examples=300, deadline=None)
@given(nodes=st.lists(st.fixed_dictionaries(
    {"metadata": st.fixed_dictionaries({"name": st.text("gpu0-", max_size=5) | st.integers(0, 3),
                                        "labels": st.dictionaries(LABEL, VALUE, max_size=4)}),
     "status": st.fixed_dictionaries({"allocatable": st.dictionaries(st.sampled_from(["nvidia.com/gpu", "cpu", "NVIDIA.com/gpu"]),
                                                                     VALUE, max_size=2)})},
    optional={"spec": JSON, "Metadata": JSON, "Status": JSON}), max_size=4))
def test_node_like_objects_read_alike(nodes):
    """Objects shaped as Nodes, most of them taken by the typed scan, some not (a name that is
    not a string or is empty, labels that are not all strings, members in another case)."""
    body = json.dumps({"Pod": {}, "Nodes": {"items": nodes}}).encode()
    assert nodes_outcome(loads_extender_args(body)) == nodes_outcome(json.loads(body))


@settings(max_examples=200, deadline=None)
@given(pod=JSON, items=st.lists(st.dictionaries(st.sampled_from(["metadata", "Metadata", "status", "spec", "x"]),
                                                 st.dictionaries(st.sampled_from(["name", "labels", "allocatable", "Labels", "y"]),
                                                                 JSON, max_size=3), max_size=3), max_size=3))
def test_random_extender_args_read_alike(pod, items):
    body = json.dumps({"Pod": pod, "Nodes": {"items": items}}).encode()
    assert outcome(loads, body) == outcome(json.loads, body)
    assert nodes_outcome(loads_extender_args(body)) == nodes_outcome(json.loads(body))
