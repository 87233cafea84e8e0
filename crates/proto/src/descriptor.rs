//! Every gRPC service and method in `proto/rill/`, read from the descriptor set the build
//! compiles alongside the code. Tests take the list of RPCs from here rather than from a list
//! someone must remember to extend: the trust-boundary tests send every internal RPC to the
//! client listener, and the authorization mapping must name every public RPC.

use prost::Message;
use prost_types::FileDescriptorSet;

/// The compiled descriptor set of every file in `proto/rill/`.
pub const FILE_DESCRIPTOR_SET: &[u8] = include_bytes!(concat!(env!("OUT_DIR"), "/rill_descriptor.bin"));

/// The protobuf package of the node-to-node services.
pub const INTERNAL_PACKAGE: &str = "rill.internal";

/// One RPC.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Rpc {
    /// Fully qualified service name, e.g. `rill.records.Records`.
    pub service: String,
    /// Method name, e.g. `Produce`.
    pub method: String,
    /// Served only on a node's internal listener (its package is [`INTERNAL_PACKAGE`]).
    pub internal: bool,
}

impl Rpc {
    /// The HTTP/2 path a gRPC call uses: `/rill.records.Records/Produce`.
    pub fn path(&self) -> String {
        format!("/{}/{}", self.service, self.method)
    }
}

/// Every RPC of every service, in file and declaration order.
pub fn rpcs() -> Result<Vec<Rpc>, prost::DecodeError> {
    let set = FileDescriptorSet::decode(FILE_DESCRIPTOR_SET)?;
    let mut out = Vec::new();
    for file in set.file {
        let package = file.package.unwrap_or_default();
        for service in file.service {
            let name = format!("{package}.{}", service.name.unwrap_or_default());
            for method in service.method {
                out.push(Rpc {
                    service: name.clone(),
                    method: method.name.unwrap_or_default(),
                    internal: package == INTERNAL_PACKAGE,
                });
            }
        }
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn lists_public_and_internal_rpcs() {
        let rpcs = rpcs().unwrap_or_default();
        let has = |path: &str, internal: bool| rpcs.iter().any(|r| r.path() == path && r.internal == internal);
        assert!(has("/rill.records.Records/Produce", false));
        assert!(has("/rill.groups.Groups/CommitOffsets", false));
        assert!(has("/rill.internal.Cluster/ProposeMeta", true));
        assert!(has("/rill.internal.RaftTransport/InstallSnapshot", true));
        assert!(has("/rill.transactions.Transactions/EndTxn", false));
        assert!(has("/rill.internal.Cluster/WriteTxnMarkers", true));
        assert!(has("/rill.internal.Cluster/AddTxnPartition", true));
        assert!(has("/rill.internal.Cluster/AddTxnPartitions", true));
        assert!(has("/rill.internal.Cluster/WriteDeadLetter", true));
        assert!(has("/rill.share.Share/DescribeShareGroup", false));
        assert_eq!(rpcs.iter().filter(|r| r.internal).count(), 14, "{rpcs:#?}");
    }
}
