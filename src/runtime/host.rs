//! What the host hands the component besides sockets: environment variables
//! (wasi:cli/environment) and files under preopened directories
//! (wasi:filesystem), read through those interfaces directly. std's `env`
//! and `fs` go through wasi-libc, whose environ and descriptor table also
//! import wasi:cli/exit, stdin, stdout, stderr and the terminal interfaces,
//! which the driver never uses (`cargo xtask build` checks the import list).
//! Natively (unit tests) std stands in.

/// The largest file the driver reads (a CA bundle, a certificate and key,
/// `resolv.conf`): a bigger one is an error, not an unbounded allocation.
pub const MAX_FILE: usize = 4 << 20;

/// The environment variable `name`, if the host set it.
#[cfg(target_os = "wasi")]
pub fn env_var(name: &str) -> Option<String> {
    wasi::cli::environment::get_environment()
        .into_iter()
        .find_map(|(k, v)| (k == name).then_some(v))
}

#[cfg(not(target_os = "wasi"))]
pub fn env_var(name: &str) -> Option<String> {
    std::env::var(name).ok()
}

/// A whole file of at most `MAX_FILE` bytes, found under the preopened
/// directory whose name is the longest prefix of `path`.
#[cfg(target_os = "wasi")]
pub fn read_file(path: &str) -> std::io::Result<Vec<u8>> {
    use std::io::{Error, ErrorKind};
    use wasi::filesystem::types::{DescriptorFlags, ErrorCode, OpenFlags, PathFlags};
    let fs_error = |code: ErrorCode| {
        let kind = match code {
            ErrorCode::NoEntry => ErrorKind::NotFound,
            ErrorCode::Access | ErrorCode::NotPermitted => ErrorKind::PermissionDenied,
            _ => ErrorKind::Other,
        };
        Error::new(kind, format!("{path}: {}", code.name()))
    };
    let (dir, relative) = wasi::filesystem::preopens::get_directories()
        .into_iter()
        .filter_map(|(dir, name)| Some((under(path, &name)?, name.len(), dir)))
        .max_by_key(|(_, len, _)| *len)
        .map(|(relative, _, dir)| (dir, relative))
        .ok_or_else(|| {
            Error::new(
                ErrorKind::NotFound,
                format!("{path} is under no directory the host preopened"),
            )
        })?;
    let file = dir
        .open_at(
            PathFlags::SYMLINK_FOLLOW,
            &relative,
            OpenFlags::empty(),
            DescriptorFlags::READ,
        )
        .map_err(fs_error)?;
    let mut bytes = Vec::new();
    loop {
        let (chunk, end) = file.read(64 * 1024, bytes.len() as u64).map_err(fs_error)?;
        bytes.extend_from_slice(&chunk);
        if bytes.len() > MAX_FILE {
            return Err(Error::other(format!("{path} is over {MAX_FILE} bytes")));
        }
        if end || chunk.is_empty() {
            return Ok(bytes);
        }
    }
}

#[cfg(not(target_os = "wasi"))]
pub fn read_file(path: &str) -> std::io::Result<Vec<u8>> {
    use std::io::Read;
    let mut bytes = Vec::new();
    std::fs::File::open(path)?
        .take(MAX_FILE as u64 + 1)
        .read_to_end(&mut bytes)?;
    if bytes.len() > MAX_FILE {
        return Err(std::io::Error::other(format!(
            "{path} is over {MAX_FILE} bytes"
        )));
    }
    Ok(bytes)
}

/// `path` relative to the preopened directory `dir`, if it lies under it
/// (as wasi-libc resolves paths): `/etc/resolv.conf` is `resolv.conf` under
/// `/etc` and `etc/resolv.conf` under `/`; a relative path is under `.`.
#[cfg_attr(not(target_os = "wasi"), allow(dead_code))]
fn under(path: &str, dir: &str) -> Option<String> {
    let path = path.trim_start_matches("./");
    let dir = dir.trim_start_matches("./");
    let relative = if dir.is_empty() || dir == "." {
        (!path.starts_with('/')).then_some(path)?
    } else if dir == "/" {
        path.strip_prefix('/')?
    } else {
        let dir = dir.trim_end_matches('/');
        match path.strip_prefix(dir)? {
            "" => ".",
            rest => rest.strip_prefix('/')?,
        }
    };
    Some(if relative.is_empty() { "." } else { relative }.to_string())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn paths_resolve_under_their_preopened_directory() {
        assert_eq!(
            under("/etc/resolv.conf", "/etc").as_deref(),
            Some("resolv.conf")
        );
        assert_eq!(
            under("/etc/resolv.conf", "/etc/").as_deref(),
            Some("resolv.conf")
        );
        assert_eq!(
            under("/etc/resolv.conf", "/").as_deref(),
            Some("etc/resolv.conf")
        );
        assert_eq!(under("/etc", "/etc").as_deref(), Some("."));
        assert_eq!(under("certs/ca.pem", ".").as_deref(), Some("certs/ca.pem"));
        assert_eq!(under("./ca.pem", ".").as_deref(), Some("ca.pem"));
        assert_eq!(under("ca.pem", "certs"), None);
        assert_eq!(under("certs/ca.pem", "certs").as_deref(), Some("ca.pem"));
        // A name that merely starts like the directory is not under it.
        assert_eq!(under("/etcetera/x", "/etc"), None);
        assert_eq!(under("/etc/resolv.conf", "."), None);
    }

    #[test]
    fn a_file_over_the_limit_is_an_error() {
        let path = std::env::temp_dir().join(format!("mongo-wasi-big-{}", std::process::id()));
        std::fs::write(&path, vec![b'x'; MAX_FILE + 1]).unwrap();
        let result = read_file(path.to_str().unwrap());
        let _ = std::fs::remove_file(&path);
        let e = result.unwrap_err();
        assert!(e.to_string().contains("is over"), "{e}");
    }
}
