//! A node's topology as dpm needs it for binding: hwloc's objects (machine,
//! packages, NUMA nodes, caches, cores, PUs, and GPUs among the OS devices)
//! with their CPU and NUMA sets, read from hwloc's XML (what the daemon
//! exports for `PMI_hwloc_xmlfile`, or a file given by `HWLOC_XMLFILE`).
//!
//! The reader takes the subset of XML hwloc writes (elements with quoted
//! attributes, the XML declaration, a doctype, comments, text); anything else
//! is an error, never a panic. Sizes are bounded ([`MAX_XML`], [`MAX_OBJECTS`],
//! [`MAX_DEPTH`]).

use crate::cpuset::CpuSet;

/// The largest topology file read (hwloc's export of a 1024-core machine
/// with its I/O devices is a few MB).
pub const MAX_XML: usize = 64 << 20;
/// The most objects kept.
pub const MAX_OBJECTS: usize = 1 << 20;
/// The deepest nesting of elements.
pub const MAX_DEPTH: usize = 256;

/// The kinds of object binding and mapping use.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Kind {
    Machine,
    Package,
    Die,
    Group,
    Numa,
    L3,
    L2,
    L1,
    Core,
    Pu,
    /// An OS device (GPU, NIC, disk…): `name` and `subtype` say which.
    OsDev,
    /// Anything else (other caches, bridges, PCI devices, misc).
    Other,
}

impl Kind {
    fn from_xml(ty: &str, depth: Option<u32>) -> Kind {
        match ty {
            "Machine" | "System" => Kind::Machine,
            "Package" | "Socket" => Kind::Package,
            "Die" => Kind::Die,
            "Group" => Kind::Group,
            "NUMANode" | "Node" => Kind::Numa,
            "L3Cache" => Kind::L3,
            "L2Cache" => Kind::L2,
            "L1Cache" => Kind::L1,
            // hwloc 1.x: one Cache type with its level.
            "Cache" => match depth {
                Some(1) => Kind::L1,
                Some(2) => Kind::L2,
                Some(3) => Kind::L3,
                _ => Kind::Other,
            },
            "Core" => Kind::Core,
            "PU" => Kind::Pu,
            "OSDev" => Kind::OsDev,
            _ => Kind::Other,
        }
    }

    /// How Open MPI's `--report-bindings` names it.
    pub fn report_name(self) -> &'static str {
        match self {
            Kind::Machine => "machine",
            Kind::Package => "package",
            Kind::Die => "die",
            Kind::Group => "group",
            Kind::Numa => "numa",
            Kind::L3 => "l3cache",
            Kind::L2 => "l2cache",
            Kind::L1 => "l1cache",
            Kind::Core => "core",
            Kind::Pu => "hwt",
            Kind::OsDev => "osdev",
            Kind::Other => "other",
        }
    }
}

/// One object of the topology.
#[derive(Clone, Debug)]
pub struct Obj {
    pub kind: Kind,
    pub os_index: Option<u32>,
    /// Its index among the objects of its kind, in the topology's order
    /// (hwloc's logical index).
    pub logical: u32,
    pub cpuset: CpuSet,
    pub nodeset: CpuSet,
    pub parent: Option<usize>,
    /// OS devices: `cuda0`, `rsmi1`, `eth0`…
    pub name: Option<String>,
    pub subtype: Option<String>,
}

/// Why a topology could not be read.
#[derive(Debug, thiserror::Error)]
pub enum TopologyError {
    #[error("the topology is larger than {MAX_XML} bytes")]
    TooLarge,
    #[error("the topology is not hwloc XML: {0}")]
    Xml(String),
    #[error("the topology names no processing unit (PU)")]
    NoPus,
}

/// A node's topology: objects in document (depth-first) order.
#[derive(Clone, Debug)]
pub struct Topology {
    objs: Vec<Obj>,
}

impl Topology {
    /// Read hwloc's XML (version 1.x or 2.x).
    pub fn from_xml(xml: &str) -> Result<Topology, TopologyError> {
        if xml.len() > MAX_XML {
            return Err(TopologyError::TooLarge);
        }
        let mut objs: Vec<Obj> = Vec::new();
        // The open elements: for `object` ones, their index in `objs`.
        let mut stack: Vec<Option<usize>> = Vec::new();
        let mut counts = std::collections::HashMap::<Kind, u32>::new();
        let mut rest = xml;
        let err = |m: &str| TopologyError::Xml(m.to_string());
        while let Some(start) = rest.find('<') {
            rest = &rest[start..];
            if let Some(r) = rest.strip_prefix("<!--") {
                let end = r.find("-->").ok_or_else(|| err("an unterminated comment"))?;
                rest = &r[end + 3..];
                continue;
            }
            if rest.starts_with("<?") || rest.starts_with("<!") {
                let end = rest.find('>').ok_or_else(|| err("an unterminated declaration"))?;
                rest = &rest[end + 1..];
                continue;
            }
            let end = tag_end(rest).ok_or_else(|| err("an unterminated element"))?;
            let tag = &rest[1..end];
            rest = &rest[end + 1..];
            if let Some(name) = tag.strip_prefix('/') {
                match stack.pop() {
                    Some(_) => {}
                    None => return Err(err(&format!("</{}> closes nothing", name.trim()))),
                }
                continue;
            }
            let (tag, closed) = match tag.strip_suffix('/') {
                Some(t) => (t, true),
                None => (tag, false),
            };
            let (name, attrs) = split_tag(tag).ok_or_else(|| err("a malformed element"))?;
            let mut index = None;
            if name == "object" {
                if objs.len() >= MAX_OBJECTS {
                    return Err(err("too many objects"));
                }
                let get = |k: &str| attrs.iter().find(|(a, _)| a == k).map(|(_, v)| v.as_str());
                let ty = get("type").ok_or_else(|| err("an object without a type"))?;
                let kind = Kind::from_xml(ty, get("depth").and_then(|d| d.parse().ok()));
                let set = |k: &str| -> Result<CpuSet, TopologyError> {
                    get(k).map(CpuSet::from_hwloc).transpose().map_err(|e| TopologyError::Xml(e.to_string())).map(Option::unwrap_or_default)
                };
                let parent = stack.iter().rev().find_map(|s| *s);
                let (cpuset, nodeset) = (set("cpuset")?, set("nodeset")?);
                // I/O objects carry no sets: their locality is their first
                // ancestor's.
                let (cpuset, nodeset) = match (get("cpuset"), parent) {
                    (None, Some(p)) => (objs[p].cpuset.clone(), objs[p].nodeset.clone()),
                    _ => (cpuset, nodeset),
                };
                let count = counts.entry(kind).or_default();
                objs.push(Obj {
                    kind,
                    os_index: get("os_index").and_then(|i| i.parse().ok()),
                    logical: *count,
                    cpuset,
                    nodeset,
                    parent,
                    name: get("name").map(str::to_string),
                    subtype: get("subtype").map(str::to_string),
                });
                *count += 1;
                index = Some(objs.len() - 1);
            }
            if !closed {
                if stack.len() >= MAX_DEPTH {
                    return Err(err("nested too deep"));
                }
                stack.push(index);
            }
        }
        if !stack.is_empty() {
            return Err(err("unclosed elements at the end"));
        }
        if !objs.iter().any(|o| o.kind == Kind::Pu) {
            return Err(TopologyError::NoPus);
        }
        Ok(Topology { objs })
    }

    pub fn objects(&self) -> &[Obj] {
        &self.objs
    }

    /// The objects of `kind`, in order.
    pub fn of_kind(&self, kind: Kind) -> impl Iterator<Item = (usize, &Obj)> + '_ {
        self.objs.iter().enumerate().filter(move |(_, o)| o.kind == kind)
    }

    /// Every PU's number.
    pub fn pus(&self) -> CpuSet {
        self.of_kind(Kind::Pu).filter_map(|(_, o)| o.os_index).collect()
    }

    /// The closest ancestor of object `i` (itself included) of `kind`.
    pub fn ancestor(&self, mut i: usize, kind: Kind) -> Option<usize> {
        loop {
            if self.objs[i].kind == kind {
                return Some(i);
            }
            i = self.objs[i].parent?;
        }
    }

    /// The object of `kind` holding PU `cpu`, if any.
    pub fn holding(&self, cpu: u32, kind: Kind) -> Option<usize> {
        self.of_kind(kind).find(|(_, o)| o.cpuset.contains(cpu)).map(|(i, _)| i)
    }
}

/// The index of the `>` ending the tag that starts `s`, outside quotes.
fn tag_end(s: &str) -> Option<usize> {
    let mut quote = None;
    for (i, c) in s.char_indices().skip(1) {
        match (quote, c) {
            (None, '"' | '\'') => quote = Some(c),
            (Some(q), c) if c == q => quote = None,
            (None, '>') => return Some(i),
            _ => {}
        }
    }
    None
}

/// An element's name and attributes (values unescaped).
fn split_tag(tag: &str) -> Option<(&str, Vec<(String, String)>)> {
    let tag = tag.trim();
    let name_end = tag.find(char::is_whitespace).unwrap_or(tag.len());
    let (name, mut rest) = tag.split_at(name_end);
    if name.is_empty() {
        return None;
    }
    let mut attrs = Vec::new();
    loop {
        rest = rest.trim_start();
        if rest.is_empty() {
            return Some((name, attrs));
        }
        let eq = rest.find('=')?;
        let key = rest[..eq].trim();
        let after = rest[eq + 1..].trim_start();
        let q = after.chars().next().filter(|c| *c == '"' || *c == '\'')?;
        let close = after[1..].find(q)? + 1;
        attrs.push((key.to_string(), unescape(&after[1..close])));
        rest = &after[close + 1..];
    }
}

fn unescape(v: &str) -> String {
    v.replace("&quot;", "\"").replace("&apos;", "'").replace("&lt;", "<").replace("&gt;", ">").replace("&amp;", "&")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn malformed_xml_is_an_error_not_a_panic() {
        for bad in [
            "",
            "<object type=\"PU\" cpuset=\"0x1\">",
            "</object>",
            "<object cpuset=\"0x1\"/>",
            "<object type=\"PU\" cpuset=\"zz\"/>",
            "<",
            "<!-- x",
            "<a b=\"1>",
        ] {
            assert!(Topology::from_xml(bad).is_err(), "{bad}");
        }
        let deep = "<a>".repeat(MAX_DEPTH + 1);
        assert!(Topology::from_xml(&deep).is_err());
    }

    #[test]
    fn a_minimal_topology_reads() {
        let t = Topology::from_xml(
            "<?xml version=\"1.0\"?><!DOCTYPE topology SYSTEM \"hwloc2.dtd\"><topology><!-- c --><object type=\"Machine\" cpuset=\"0x3\" nodeset=\"0x1\">\
             <object type=\"Core\" os_index=\"0\" cpuset=\"0x3\"><object type=\"PU\" os_index=\"0\" cpuset=\"0x1\"/><object type='PU' os_index='1' cpuset='0x2'/></object>\
             <object type=\"OSDev\" name=\"cuda0\" subtype=\"CUDA\"/></object></topology>",
        )
        .unwrap();
        assert_eq!(t.pus().to_list(), "0-1");
        let gpu = t.of_kind(Kind::OsDev).next().unwrap().1;
        assert_eq!((gpu.name.as_deref(), gpu.cpuset.to_list()), (Some("cuda0"), "0-1".to_string()));
        assert_eq!(t.ancestor(2, Kind::Machine), Some(0));
        assert_eq!(t.holding(1, Kind::Pu), Some(3));
    }
}
