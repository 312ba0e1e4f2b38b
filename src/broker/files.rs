//! A file operation the plan stage allowed: the permit and the workspace to
//! do it in. A door gets one only from [`super::Broker::files`], so every
//! path it opens is under the policy first and beneath the root after.

use crate::plan::FilePermit;
use crate::workspace::Workspace;

/// The workspace, for one operation the policy allowed.
#[derive(Debug, Clone)]
pub(crate) struct Files {
    permit: FilePermit,
    workspace: Workspace,
}

impl Files {
    pub(super) fn new(permit: FilePermit, workspace: Workspace) -> Self {
        Self { permit, workspace }
    }

    /// The planner's word: which operation this is.
    pub(crate) fn permit(&self) -> FilePermit {
        self.permit
    }

    /// Where to do it: every path resolved beneath the root.
    pub(crate) fn workspace(&self) -> &Workspace {
        &self.workspace
    }
}
