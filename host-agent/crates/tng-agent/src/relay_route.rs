//! Which relay a client's connections to a server go through: one named by address, or one on the path (`on-path`),
//! as `--relay` and a policy's `host_policy.relay` say (docs/architecture.md, "Relays").

use std::fmt;
use std::net::SocketAddr;
use std::str::FromStr;

/// What `--relay` and `host_policy.relay` accept besides an address.
const ON_PATH: &str = "on-path";

/// A client's way to its server through a relay.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum RelayRoute {
    /// SECTIONs go to the `tng relay` at this address, naming the server.
    At(SocketAddr),
    /// SECTIONs go to the server itself: a `tng relay --on-path` on the way intercepts them, and without one the
    /// server terminates the single section.
    OnPath,
}

impl RelayRoute {
    /// The address the SECTIONs for `server` are sent to.
    pub fn relay_for(self, server: SocketAddr) -> SocketAddr {
        match self {
            RelayRoute::At(relay) => relay,
            RelayRoute::OnPath => server,
        }
    }
}

impl FromStr for RelayRoute {
    type Err = String;

    fn from_str(text: &str) -> Result<Self, String> {
        if text == ON_PATH {
            return Ok(RelayRoute::OnPath);
        }
        let relay: SocketAddr =
            text.parse().map_err(|_| format!("{text:?} is not {ON_PATH:?} or an address a.b.c.d:port or [v6]:port"))?;
        if relay.port() == 0 || relay.ip().is_unspecified() || relay.ip().is_multicast() {
            return Err(format!("{text:?} cannot be a relay's address"));
        }
        Ok(RelayRoute::At(relay))
    }
}

impl fmt::Display for RelayRoute {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            RelayRoute::At(relay) => relay.fmt(f),
            RelayRoute::OnPath => f.write_str(ON_PATH),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_route_is_an_address_or_on_path_and_on_path_sends_to_the_server() {
        let server: SocketAddr = "10.0.2.2:4477".parse().unwrap();
        let at: RelayRoute = "10.0.1.1:4477".parse().unwrap();
        assert_eq!(at.relay_for(server), "10.0.1.1:4477".parse().unwrap());
        let on_path: RelayRoute = "on-path".parse().unwrap();
        assert_eq!((on_path, on_path.relay_for(server)), (RelayRoute::OnPath, server));
        assert_eq!([at.to_string(), on_path.to_string()], ["10.0.1.1:4477", "on-path"]);
        for bad in ["relay.example:4477", "10.0.0.1", "10.0.0.1:0", "0.0.0.0:4477", "on_path"] {
            let error = bad.parse::<RelayRoute>().unwrap_err();
            assert!(error.contains(bad), "{error}");
        }
    }
}
