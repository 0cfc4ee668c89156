"""The shipped hostfiles parse with mlx.launch's own parser and have the shape their backend needs."""

import ipaddress

import pytest
from mlx._distributed_utils.common import Hostfile

from tests.support.pair import REPO

HOSTFILES = REPO / "hostfiles"


@pytest.mark.parametrize("name", ["mac-pair.json", "mac-pair-rdma.json", "local-pair.json"])
def test_two_hosts_with_ips(name):
    hostfile = Hostfile.from_file(HOSTFILES / name)
    assert len(hostfile.hosts) == 2
    for host in hostfile.hosts:
        assert host.ips and all(ipaddress.ip_address(ip) for ip in host.ips)


def test_local_pair_is_loopback_ring():
    hostfile = Hostfile.from_file(HOSTFILES / "local-pair.json")
    assert hostfile.backend == "ring"
    assert {h.ssh_hostname for h in hostfile.hosts} == {"127.0.0.1"}  # mlx.launch runs these locally, no ssh
    assert all(h.ips == ["127.0.0.1"] for h in hostfile.hosts)


def test_mac_pair_rings_over_private_addresses():
    hostfile = Hostfile.from_file(HOSTFILES / "mac-pair.json")
    assert hostfile.backend == "ring"
    assert all(ipaddress.ip_address(h.ips[0]).is_private for h in hostfile.hosts)


def test_rdma_matrix_is_full_with_null_self():
    hostfile = Hostfile.from_file(HOSTFILES / "mac-pair-rdma.json")
    assert hostfile.backend == "jaccl"
    n = len(hostfile.hosts)
    for i, host in enumerate(hostfile.hosts):
        assert len(host.rdma) == n
        assert host.rdma[i] is None
        assert all(isinstance(d, str) and d.startswith("rdma_") for j, d in enumerate(host.rdma) if j != i)
