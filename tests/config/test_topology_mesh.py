"""The layout's degrees and its one device mesh (``Topology.build_mesh``): the mesh's dimensions
are the degrees above 1 plus those a strategy names, in torchtitan's order; no other module
builds a mesh."""

from __future__ import annotations

import re
import socket
from pathlib import Path

import pytest
import torch.distributed as dist

from framework.config.topology import MESH_ORDER, Topology
from framework.strategies.registry import STRATEGIES, typed_options

ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture
def one_rank_group():
    """A real gloo process group of one rank (a mesh needs one)."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    dist.init_process_group("gloo", init_method=f"tcp://127.0.0.1:{port}", rank=0, world_size=1)
    yield
    dist.destroy_process_group()


def test_degrees_multiply_to_the_world_and_are_described_by_name():
    t = Topology(num_nodes=2, processes_per_node=4, dp_replicate=2, tp=2)
    assert t.degrees == {"pp": 1, "dp_replicate": 2, "dp_shard": 2, "ep": 1, "cp": 1, "tp": 2}
    assert t.world_size == 8 == t.pp * t.dp_replicate * t.dp_shard * t.tp
    assert t.data_parallel_size == 4 and t.dp_dims == ("dp_replicate", "dp_shard")
    assert t.describe() == "pp(1) x dp_replicate(2) x dp_shard(2) x ep(1) x cp(1) x tp(2) = 8 rank(s)"


@pytest.mark.parametrize(
    "strategy, options, layout",
    [
        ("fsdp", {}, {"pp": 1, "dp_replicate": 1, "dp_shard": 4, "ep": 1, "cp": 1, "tp": 1}),
        ("hsdp", {"replicate": 2}, {"pp": 1, "dp_replicate": 2, "dp_shard": 2, "ep": 1, "cp": 1, "tp": 1}),
        ("tp", {}, {"pp": 1, "dp_replicate": 1, "dp_shard": 1, "ep": 1, "cp": 1, "tp": 4}),
        ("fsdp_tp", {"tensor_parallel": 2}, {"pp": 1, "dp_replicate": 1, "dp_shard": 2, "ep": 1, "cp": 1, "tp": 2}),
        ("pp", {"stages": 2}, {"pp": 2, "dp_replicate": 1, "dp_shard": 2, "ep": 1, "cp": 1, "tp": 1}),
        ("parallel", {"pp": 2}, {"pp": 2, "dp_replicate": 1, "dp_shard": 2, "ep": 1, "cp": 1, "tp": 1}),
        (
            "pp",
            {"stages": 2, "data_parallel": "ddp"},
            {"pp": 2, "dp_replicate": 2, "dp_shard": 1, "ep": 1, "cp": 1, "tp": 1},
        ),
    ],
)
def test_each_sharding_strategy_is_a_product_of_degrees(strategy, options, layout):
    cls = STRATEGIES[strategy]
    topology = cls.make_topology(4, 1, typed_options({"name": strategy, **options}, cls))
    assert topology.degrees == layout


def test_the_mesh_has_the_degrees_above_one_and_the_needed_ones(one_rank_group):
    mesh = Topology().build_mesh("cpu", "dp_shard", "tp")
    assert mesh.mesh_dim_names == ("dp_shard", "tp") and tuple(mesh.shape) == (1, 1)
    assert mesh[Topology().dp_dims].mesh_dim_names == ("dp_shard",)
    with pytest.raises(ValueError, match="mesh dimensions \\['sp'\\]: valid ones are pp, dp_replicate"):
        Topology().build_mesh("cpu", "sp")
    assert MESH_ORDER == ("pp", "dp_replicate", "dp_shard", "ep", "cp", "tp")


def test_one_mesh_constructor_in_the_framework():
    """Every strategy that shards takes its mesh from Topology.build_mesh, none builds its own."""
    builders = [
        str(path.relative_to(ROOT))
        for path in sorted((ROOT / "framework").rglob("*.py"))
        for line in path.read_text().splitlines()
        if re.search(r"\binit_device_mesh\(|\bDeviceMesh\(", line)
    ]
    assert builders == ["framework/config/topology.py"], builders
