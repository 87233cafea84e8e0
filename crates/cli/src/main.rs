//! `rill`: the command line for a Rill cluster.
//!
//! ```text
//! rill [--bootstrap host:port[,…]] topic create|describe|list …
//!                                  produce TOPIC …   (records from stdin, one per line)
//!                                  consume TOPIC …
//!                                  cluster status
//!      rill dev [--nodes 3]       a local cluster until Ctrl-C
//!      rill bench [--peers …]     workloads against Rill and its peers
//! ```

/// mimalloc rather than the system allocator: the producer and the consumer allocate per record;
/// glibc's malloc/free took ~18% of the bench client's CPU at max rate.
#[global_allocator]
static ALLOCATOR: mimalloc::MiMalloc = mimalloc::MiMalloc;

mod commands;
mod format;

use std::process::ExitCode;

use clap::{Parser, Subcommand};

/// Command line for a Rill cluster.
#[derive(Debug, Parser)]
#[command(name = "rill", version, about = "Command line for a Rill cluster")]
struct Cli {
    /// Cluster address(es), host:port, comma-separated.
    #[arg(long, global = true, env = "RILL_BOOTSTRAP", default_value = "127.0.0.1:7001", value_delimiter = ',')]
    bootstrap: Vec<String>,
    #[command(subcommand)]
    command: Command,
}

#[derive(Debug, Subcommand)]
enum Command {
    /// Create, describe and list topics.
    #[command(subcommand)]
    Topic(commands::topic::TopicCommand),
    /// Produce records from stdin, one per line.
    Produce(commands::produce::ProduceArgs),
    /// Consume records and print them.
    Consume(commands::consume::ConsumeArgs),
    /// Cluster state.
    #[command(subcommand)]
    Cluster(commands::cluster::ClusterCommand),
    /// Consumer groups: list, describe (members, lag), reset offsets, delete.
    #[command(subcommand)]
    Group(commands::group::GroupCommand),
    /// Share groups (queues): their settings. `rill consume --share-group` consumes as one.
    #[command(subcommand)]
    Share(commands::share::ShareCommand),
    /// Transactions: list, describe, abort an open one.
    #[command(subcommand)]
    Txn(commands::txn::TxnCommand),
    /// Run a local cluster of rill-server processes until Ctrl-C.
    Dev(commands::dev::DevArgs),
    /// Certificates for mutual TLS between nodes: a cluster CA, node certificates.
    #[command(subcommand)]
    Tls(commands::tls::TlsCommand),
    /// Benchmark Rill (and, with --peers, NATS JetStream, RabbitMQ, Redis) on this machine.
    /// Runs `rill-bench` (beside this executable, else from $PATH) with the same arguments;
    /// `rill bench --help` lists them.
    #[command(disable_help_flag = true)]
    Bench {
        /// Arguments for rill-bench.
        #[arg(trailing_var_arg = true, allow_hyphen_values = true)]
        args: Vec<std::ffi::OsString>,
    },
}

fn main() -> ExitCode {
    let cli = Cli::parse();
    if let Command::Bench { args } = &cli.command {
        return run_bench(args);
    }
    if let Command::Tls(command) = cli.command {
        return match commands::tls::run(command) {
            Ok(()) => ExitCode::SUCCESS,
            Err(e) => {
                eprintln!("error: {e:#}");
                ExitCode::FAILURE
            }
        };
    }
    init_logging();
    let runtime = match tokio::runtime::Builder::new_multi_thread().worker_threads(2).enable_all().build() {
        Ok(r) => r,
        Err(e) => {
            eprintln!("error: cannot start the runtime: {e}");
            return ExitCode::FAILURE;
        }
    };
    let result = runtime.block_on(async move {
        match cli.command {
            Command::Topic(c) => commands::topic::run(&cli.bootstrap, c).await,
            Command::Produce(a) => commands::produce::run(&cli.bootstrap, a).await,
            Command::Consume(a) => commands::consume::run(&cli.bootstrap, a).await,
            Command::Cluster(c) => commands::cluster::run(&cli.bootstrap, c).await,
            Command::Group(c) => commands::group::run(&cli.bootstrap, c).await,
            Command::Txn(c) => commands::txn::run(&cli.bootstrap, c).await,
            Command::Share(c) => commands::share::run(&cli.bootstrap, c).await,
            Command::Dev(a) => commands::dev::run(a).await,
            Command::Bench { .. } | Command::Tls(_) => Ok(()),
        }
    });
    match result {
        Ok(()) => ExitCode::SUCCESS,
        // The reader went away (`rill consume … | head`): not an error.
        Err(e)
            if e.chain().any(|c| {
                c.downcast_ref::<std::io::Error>().is_some_and(|io| io.kind() == std::io::ErrorKind::BrokenPipe)
            }) =>
        {
            ExitCode::SUCCESS
        }
        Err(e) => {
            eprintln!("error: {e:#}");
            ExitCode::FAILURE
        }
    }
}

/// `rill bench …` is `rill-bench …`: the bench is its own binary, so `rill` does not link the
/// peers' client libraries. Replaces this process; returns only when that fails.
fn run_bench(args: &[std::ffi::OsString]) -> ExitCode {
    use std::os::unix::process::CommandExt;
    let beside = std::env::current_exe().ok().and_then(|p| p.parent().map(|d| d.join("rill-bench")));
    let bin = beside.filter(|p| p.is_file()).unwrap_or_else(|| "rill-bench".into());
    let err = std::process::Command::new(&bin).args(args).exec();
    eprintln!("error: cannot run {} ({err}); build it with `cargo build --bins`", bin.display());
    ExitCode::FAILURE
}

/// Client-side logs (retries, metadata refreshes) go to stderr when `RILL_LOG` is set, in
/// `RUST_LOG` syntax (e.g. `RILL_LOG=rill_client=debug`). Silent otherwise: stdout carries data.
fn init_logging() {
    let Ok(filter) = std::env::var("RILL_LOG") else { return };
    let filter = tracing_subscriber::EnvFilter::try_new(&filter).unwrap_or_else(|e| {
        eprintln!("warning: RILL_LOG={filter:?} is not a valid filter ({e}); logging warnings only");
        tracing_subscriber::EnvFilter::new("warn")
    });
    tracing_subscriber::fmt().with_env_filter(filter).with_writer(std::io::stderr).init();
}
