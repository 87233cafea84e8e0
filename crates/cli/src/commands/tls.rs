//! `rill tls`: certificates for the internal listener's mutual TLS (docs/security.md).
//!
//! `rill tls ca --dir D` makes a cluster CA (`D/ca.pem`, `D/ca.key`, `D/ca.name`); `rill tls node
//! --dir D --node-id N` issues `D/node-N.pem` and `D/node-N.key` from it and prints the
//! `rill-server` flags that use them. `rill dev` keeps its CA in `DATA_DIR/tls/`, so a node added
//! to a dev cluster gets its certificate with `rill tls node --dir .rill-dev/tls --node-id 4`.

use std::path::PathBuf;

use anyhow::Context;
use clap::Subcommand;
use rill_tls::issue::ClusterCa;

/// `rill tls …`
#[derive(Debug, Subcommand)]
pub enum TlsCommand {
    /// Make a new cluster CA in a directory.
    Ca {
        /// Directory for ca.pem, ca.key (owner-only) and ca.name.
        #[arg(long)]
        dir: PathBuf,
        /// The CA's common name.
        #[arg(long, default_value = "Rill cluster CA")]
        name: String,
    },
    /// Issue a node certificate (subject alternative name node-N, N its node id) from the CA in a directory.
    Node {
        /// Directory holding the CA (from `rill tls ca` or `rill dev`); the certificate goes there.
        #[arg(long)]
        dir: PathBuf,
        /// The node the certificate names.
        #[arg(long)]
        node_id: u64,
    },
}

/// Runs a `rill tls` command.
pub fn run(command: TlsCommand) -> anyhow::Result<()> {
    match command {
        TlsCommand::Ca { dir, name } => {
            if dir.join("ca.key").exists() {
                anyhow::bail!(
                    "{} already holds a CA (ca.key); remove it first, or issue node certificates from it with `rill tls node`",
                    dir.display()
                );
            }
            let ca = ClusterCa::generate(&name).context("cannot make the CA")?;
            ca.save(&dir).with_context(|| format!("cannot write the CA to {}", dir.display()))?;
            println!("CA written to {}/ca.pem (private key: ca.key, keep it off the nodes)", dir.display());
        }
        TlsCommand::Node { dir, node_id } => {
            if node_id == 0 {
                anyhow::bail!("node ids start at 1");
            }
            let ca = ClusterCa::load(&dir)
                .with_context(|| format!("cannot read the CA in {} (make one with `rill tls ca`)", dir.display()))?;
            let paths = ca.write_node(&dir, node_id).context("cannot issue the certificate")?;
            println!(
                "--tls-ca {} --tls-cert {} --tls-key {}",
                paths.ca.display(),
                paths.cert.display(),
                paths.key.display()
            );
        }
    }
    Ok(())
}
