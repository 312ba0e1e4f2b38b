//! Approval by a person over MCP, as the broker's [`Approver`]: when the
//! broker's plan says a person's approval would let a request run, the
//! person behind the client is asked ([`super::portable::ask_person`]).

use rmcp::RoleServer;
use rmcp::service::Peer;

use super::portable::{ask_person, can_ask};
use crate::broker::{Answer, Approver};
use crate::plan::ApprovalAsk;

/// The person behind an MCP client, asked through its elicitation.
pub(crate) struct PeerApprover<'a>(pub(crate) &'a Peer<RoleServer>);

impl Approver for PeerApprover<'_> {
    /// The client declared form elicitation.
    fn can_ask(&self) -> bool {
        can_ask(self.0)
    }

    fn ask<'a>(&'a self, ask: &'a ApprovalAsk) -> Answer<'a> {
        Box::pin(ask_person(self.0, ask))
    }
}
