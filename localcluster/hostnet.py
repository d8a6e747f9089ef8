"""Host network plumbing: loopback aliases, sysctls and the rule that keeps pod traffic on this machine."""

from __future__ import annotations

import subprocess

from localcluster.layout import DNS_IP, KWOK_NODE_IP, NODE_IP, REAL_NODES

LOOPBACK_ALIASES = (NODE_IP, DNS_IP, KWOK_NODE_IP, *(node.ip for node in REAL_NODES[1:]))
# Pods may reach addresses on this machine, never anything beyond it: drop forwarded traffic from a
# node's pod range unless it goes into a pod bridge (its own, or another real node's). Tagged with a
# comment so `down` removes exactly these.
RULE_COMMENT = "dtjob-localcluster: keep pod traffic on this machine"
_TAG = ["-m", "comment", "--comment", RULE_COMMENT]
CONTAINMENT_RULES = (
    *(
        ["FORWARD", "-s", node.pod_cidr, "-o", other.bridge, *_TAG, "-j", "ACCEPT"]
        for node in REAL_NODES
        for other in REAL_NODES
        if other != node
    ),
    *(["FORWARD", "-s", node.pod_cidr, "!", "-o", node.bridge, *_TAG, "-j", "DROP"] for node in REAL_NODES),
)

# Chains the kubelet creates (by table), and the jumps into them from built-in chains.
KUBELET_CHAINS = {
    "mangle": ("KUBE-KUBELET-CANARY", "KUBE-IPTABLES-HINT"),
    "nat": ("KUBE-KUBELET-CANARY",),
    "filter": ("KUBE-KUBELET-CANARY", "KUBE-FIREWALL"),
}
KUBELET_JUMPS = (("filter", "INPUT", "KUBE-FIREWALL"), ("filter", "OUTPUT", "KUBE-FIREWALL"))


def _run(*args: str, check: bool = True) -> subprocess.CompletedProcess[str]:
    return subprocess.run(list(args), check=check, capture_output=True, text=True)


def add_loopback_aliases() -> None:
    present = _run("ip", "-4", "addr", "show", "dev", "lo").stdout
    for ip in LOOPBACK_ALIASES:
        if f" {ip}/32 " not in present:
            _run("ip", "addr", "add", f"{ip}/32", "dev", "lo")


def remove_loopback_aliases() -> None:
    for ip in LOOPBACK_ALIASES:
        _run("ip", "addr", "del", f"{ip}/32", "dev", "lo", check=False)


def prepare_for_pods() -> None:
    """Kernel settings the kubelet, the bridge CNI and kube-proxy need; the containment rule first."""
    for key in (
        "net.ipv4.ip_forward",
        "net.bridge.bridge-nf-call-iptables",
        "net.bridge.bridge-nf-call-ip6tables",
    ):
        _run("sysctl", "-w", f"{key}=1", check=False)
    _run("mount", "--make-rshared", "/")  # no systemd: / may be private; kubelet needs propagation
    # Each inserted at the top: the last first, so that they stand in their order (ACCEPTs before DROPs).
    for rule in reversed(CONTAINMENT_RULES):
        if _run("iptables", "-C", *rule, check=False).returncode != 0:
            _run("iptables", "-I", *rule)


def undo_pod_networking() -> None:
    for rule in CONTAINMENT_RULES:
        while _run("iptables", "-C", *rule, check=False).returncode == 0:
            _run("iptables", "-D", *rule)
    for node in REAL_NODES:
        _run("ip", "link", "del", node.bridge, check=False)
    # The kubelet's own chains, in IPv4 and IPv6 (kube-proxy --cleanup removes only the proxy's).
    for tool in ("iptables", "ip6tables"):
        for table, chain, target in KUBELET_JUMPS:
            while _run(tool, "-t", table, "-C", chain, "-j", target, check=False).returncode == 0:
                _run(tool, "-t", table, "-D", chain, "-j", target)
        for table, chains in KUBELET_CHAINS.items():
            for chain in chains:
                if _run(tool, "-t", table, "-F", chain, check=False).returncode == 0:
                    _run(tool, "-t", table, "-X", chain, check=False)
