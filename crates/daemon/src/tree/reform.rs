//! A daemon's part in the tree re-forming around a lost node: the fence
//! arrivals it sent up and has not seen complete (reported, if its parent
//! was lost, as cut: [`TreeNode::reattached`]), and a direct child whose
//! link broke ([`TreeNode::child_lost`]: its subtree's daemons re-attach to
//! the launcher on their own, so nothing here waits for them any more).

use dpm_kvs::{JobId, NodeId};
use dpm_proto::{ToDaemon, ToLauncher};

use super::{TreeAction, TreeNode};

impl TreeNode {
    /// Note what goes up (the fence arrivals) and comes down (their
    /// completions, a job forgotten).
    pub(super) fn track_up(&mut self, out: &[TreeAction]) {
        for action in out {
            if let TreeAction::Parent { msg: ToLauncher::FenceIn { job, epoch, .. }, .. } = action {
                self.sent_up.insert((*job, *epoch));
            }
        }
    }

    pub(super) fn track_down(&mut self, msg: &ToDaemon) {
        match msg {
            ToDaemon::FenceDone { job, epoch, .. } => self.sent_up.retain(|&(j, e)| j != *job || e > *epoch),
            ToDaemon::Forget { job } => self.sent_up.retain(|&(j, _)| j != *job),
            _ => {}
        }
    }

    /// This daemon re-attached straight below the launcher after its parent
    /// was lost: the fences whose arrival it sent up and whose completion
    /// never came back (each `(job, epoch)`, once), for the launcher to end.
    pub fn reattached(&mut self) -> Vec<(JobId, u64)> {
        std::mem::take(&mut self.sent_up).into_iter().collect()
    }

    /// Whether `node` is a direct child linked here.
    pub fn is_child(&self, node: NodeId) -> bool {
        self.router.children.contains(&node)
    }

    /// The link to direct child `child` broke: its subtree no longer
    /// contributes here (its daemons re-attach to the launcher, or are
    /// lost). Partial fences that now have every arrival due go up.
    pub fn child_lost(&mut self, child: NodeId) -> Vec<TreeAction> {
        let mut out = Vec::new();
        if !self.router.children.remove(&child) {
            return out;
        }
        let me = self.router.me;
        let router = &mut self.router;
        let below: Vec<(JobId, NodeId)> =
            router.job_nodes.iter().flat_map(|(&job, nodes)| nodes.iter().map(move |&n| (job, n))).filter(|&(_, n)| n != me).collect();
        for (job, node) in below {
            if router.hop(node) == child {
                if let Some(nodes) = router.job_nodes.get_mut(&job) {
                    nodes.remove(&node);
                }
            }
        }
        let complete: Vec<(JobId, u64)> = self
            .fences
            .iter()
            .filter(|((job, _), f)| {
                let expected = self.router.contributors(*job);
                !expected.is_empty() && expected.iter().all(|n| f.seen.contains(n))
            })
            .map(|(&key, _)| key)
            .collect();
        for (job, epoch) in complete {
            let f = self.fences.remove(&(job, epoch)).expect("present");
            out.push(TreeAction::Parent { origin: me, msg: ToLauncher::FenceIn { job, epoch, count: f.count, puts: f.puts } });
        }
        self.track_up(&out);
        out
    }
}
