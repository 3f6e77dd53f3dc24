//! GPUs among a topology's OS devices, and the variable each vendor's
//! runtime reads to see only some of them.

use crate::cpuset::CpuSet;
use crate::topology::{Kind, Topology};

/// Whose runtime a GPU belongs to (and so which variable names it).
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Vendor {
    /// NVIDIA (hwloc's `cudaN`, or `nvmlN` when CUDA's are absent).
    Cuda,
    /// AMD (hwloc's `rsmiN`).
    Rocm,
    /// Intel (hwloc's `zeN`, Level Zero).
    LevelZero,
}

impl Vendor {
    /// The variable that restricts the runtime to the listed devices.
    pub fn variable(self) -> &'static str {
        match self {
            Vendor::Cuda => "CUDA_VISIBLE_DEVICES",
            Vendor::Rocm => "ROCR_VISIBLE_DEVICES",
            Vendor::LevelZero => "ZE_AFFINITY_MASK",
        }
    }
}

/// One GPU of the node.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Gpu {
    pub vendor: Vendor,
    /// The runtime's index (N of `cudaN`).
    pub index: u32,
    /// hwloc's name of the device.
    pub name: String,
    /// The CPUs close to it (its first non-I/O ancestor's).
    pub near: CpuSet,
}

/// The GPUs of `topo`, in vendor then index order.
pub fn gpus(topo: &Topology) -> Vec<Gpu> {
    let mut found: Vec<Gpu> = Vec::new();
    let mut nvml = Vec::new();
    for (_, o) in topo.of_kind(Kind::OsDev) {
        let Some(name) = o.name.as_deref() else { continue };
        let split = name.find(|c: char| c.is_ascii_digit()).unwrap_or(name.len());
        let (prefix, number) = name.split_at(split);
        let Ok(index) = number.parse::<u32>() else { continue };
        let vendor = match prefix {
            "cuda" => Vendor::Cuda,
            "rsmi" => Vendor::Rocm,
            "ze" => Vendor::LevelZero,
            "nvml" => {
                nvml.push(Gpu { vendor: Vendor::Cuda, index, name: name.to_string(), near: o.cpuset.clone() });
                continue;
            }
            _ => continue,
        };
        found.push(Gpu { vendor, index, name: name.to_string(), near: o.cpuset.clone() });
    }
    if !found.iter().any(|g| g.vendor == Vendor::Cuda) {
        found.extend(nvml);
    }
    found.sort_by_key(|g| (g.vendor, g.index));
    found.dedup_by(|a, b| (a.vendor, a.index) == (b.vendor, b.index));
    found
}

/// The variables that show a rank only `picked` (one per vendor present).
pub fn env(picked: &[&Gpu]) -> Vec<(String, String)> {
    let mut vendors: Vec<Vendor> = picked.iter().map(|g| g.vendor).collect();
    vendors.sort();
    vendors.dedup();
    vendors
        .into_iter()
        .map(|v| {
            let list: Vec<String> = picked.iter().filter(|g| g.vendor == v).map(|g| g.index.to_string()).collect();
            (v.variable().to_string(), list.join(","))
        })
        .collect()
}
