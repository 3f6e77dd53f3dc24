#!/usr/bin/env python3
"""Regenerate the synthetic hwloc XML topologies of the binding tests.

Run from this directory: ./gen.py (needs libhwloc.so.15, hwloc 2.x). Each file
is hwloc's own export of a synthetic topology (hwloc_topology_set_synthetic),
so hwloc loads it back with HWLOC_XMLFILE; the GPU boxes get PCI devices with
OS devices (cudaN, rsmiN, zeN) added under their packages, as hwloc's I/O
discovery writes them.
"""
import ctypes
import re

hwloc = ctypes.CDLL("libhwloc.so.15")


def export(description, path):
    topo = ctypes.c_void_p()
    assert hwloc.hwloc_topology_init(ctypes.byref(topo)) == 0
    assert hwloc.hwloc_topology_set_synthetic(topo, description.encode()) == 0, description
    assert hwloc.hwloc_topology_load(topo) == 0
    assert hwloc.hwloc_topology_export_xml(topo, path.encode(), ctypes.c_ulong(0)) == 0
    hwloc.hwloc_topology_destroy(topo)
    # Nothing of this machine in the fixture.
    text = open(path).read()
    text = re.sub(r'\s*<info name="(ProcessName|hwlocVersion)" value="[^"]*"/>', "", text)
    open(path, "w").write(text)


def interleaved(packages, numas, cores, pus):
    """Linux's numbering on many two-socket machines: consecutive CPU numbers
    alternate between the packages, hyperthread siblings come last."""
    total_cores = packages * numas * cores
    order = []
    for p in range(packages):
        for n in range(numas):
            for c in range(cores):
                for t in range(pus):
                    order.append(p + packages * (n * cores + c) + total_cores * t)
    return ",".join(map(str, order))


def add_gpus(path, per_package, name, subtype, osdev_type, vendor):
    text = open(path).read()
    out, package, gp = [], 0, 10000
    for line in text.splitlines(keepends=True):
        out.append(line)
        if '<object type="Package"' in line:
            indent = line[: len(line) - len(line.lstrip())] + "  "
            for g in range(per_package):
                index = package * per_package + g
                bus = 0x17 + 0x40 * package + g
                out.append(f'{indent}<object type="PCIDev" gp_index="{gp}" pci_busid="0000:{bus:02x}:00.0" pci_type="0302 [{vendor}:20b0] [{vendor}:134f] a1" pci_link_speed="0.000000">\n')
                out.append(f'{indent}  <object type="OSDev" gp_index="{gp + 1}" name="{name}{index}" subtype="{subtype}" osdev_type="{osdev_type}"/>\n')
                out.append(f"{indent}</object>\n")
                gp += 2
            package += 1
    open(path, "w").write("".join(out))


# 2 packages x 2 NUMA nodes x 8 cores x 2 hyperthreads, numbered in order
# (a core's threads are consecutive CPUs).
export("pack:2 numa:2 l3:1 l2:8 core:1 pu:2", "2s2n8c2t.xml")
# The same machine numbered as Linux numbers many two-socket servers: CPU 0
# in package 0, CPU 1 in package 1, hyperthread siblings 32 apart.
export(f"pack:2 numa:2 l3:1 l2:8 core:1 pu:2(indexes={interleaved(2, 2, 8, 2)})", "2s2n8c2t-interleaved.xml")
# A GPU box: 2 packages x 4 cores x 2 threads, two NVIDIA GPUs per package.
export("pack:2 numa:1 l3:1 l2:4 core:1 pu:2", "gpu-nvidia.xml")
add_gpus("gpu-nvidia.xml", 2, "cuda", "CUDA", 5, "10de")
# An AMD GPU box of the same shape (ROCm SMI devices), numbered interleaved.
export(f"pack:2 numa:1 l3:1 l2:4 core:1 pu:2(indexes={interleaved(2, 1, 4, 2)})", "gpu-amd.xml")
add_gpus("gpu-amd.xml", 1, "rsmi", "RSMI", 1, "1002")
