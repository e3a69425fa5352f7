//! What the scenarios run on: the processes a run starts and stops (`process`: `floodgate
//! serve`, nginx, peers under a watchdog, free ports, what a process holds), a `floodgate` server
//! in this process ([`server`], the one file that starts the app with the API's doors), Redis
//! nodes and clusters (`redis`, the testkit's launcher), the fault proxy between servers and
//! Redis (`proxy`), the upstream behind a gateway (`upstream`), the CPU a server spends (`cpu`), the HTTP client and its fixed
//! connections (`client`), a server's `/metrics` (`metrics`), the targets decisions are asked of
//! ([`target`]) and the keys they carry ([`keys`]).

pub(crate) mod client;
pub(crate) mod cpu;
pub mod keys;
pub(crate) mod metrics;
pub(crate) mod process;
pub(crate) mod proxy;
pub(crate) mod redis;
pub mod server;
pub mod target;
pub(crate) mod upstream;

pub use self::server::LocalServer;
pub use self::target::{Shape, Target, TargetError};
