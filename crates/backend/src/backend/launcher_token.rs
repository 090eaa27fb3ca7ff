//! The rendezvous token every rank of a job is given: `NCCLPROBE_RENDEZVOUS_TOKEN` (or
//! `NCCLPROBE_RENDEZVOUS_SECRET`, its older name), or a file `NCCLPROBE_RENDEZVOUS_TOKEN_FILE`
//! names that only its owner can read.

/// The longest token file read: a token is a password, not a document; a path that names
/// something larger (a log, a device) is a mistake, said rather than read.
const MAX_TOKEN_FILE: u64 = 4096;

/// A rendezvous token, kept as its SHA-256 so the text itself is held nowhere else, and never
/// printed.
#[derive(Clone, PartialEq)]
pub struct Token {
    digest: [u8; 32],
    /// The variable it came from, for messages.
    pub from: &'static str,
}

impl Token {
    pub fn new(text: &[u8], from: &'static str) -> Token {
        use sha2::Digest;
        let mut h = sha2::Sha256::new();
        h.update(b"ncclprobe rendezvous token\0");
        h.update(text);
        Token {
            digest: h.finalize().into(),
            from,
        }
    }

    /// The handshake's MAC key.
    pub fn mac_key(&self) -> &[u8; 32] {
        &self.digest
    }
}

impl std::fmt::Debug for Token {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "Token(from {}, not shown)", self.from)
    }
}

/// The token the variables give, `None` when they give none; `Err` says what to fix.
pub fn from_vars(get: &dyn Fn(&str) -> Option<String>) -> Result<Option<Token>, String> {
    let token = get("NCCLPROBE_RENDEZVOUS_TOKEN");
    let secret = get("NCCLPROBE_RENDEZVOUS_SECRET");
    let file = get("NCCLPROBE_RENDEZVOUS_TOKEN_FILE");
    let (text, from) = match (token, secret, file) {
        (Some(_), _, Some(_)) | (_, Some(_), Some(_)) => return Err(
            "both NCCLPROBE_RENDEZVOUS_TOKEN (or _SECRET) and NCCLPROBE_RENDEZVOUS_TOKEN_FILE are set; give every rank one of them".into(),
        ),
        (Some(t), Some(s), None) if t != s => return Err(
            "NCCLPROBE_RENDEZVOUS_TOKEN and NCCLPROBE_RENDEZVOUS_SECRET (its older name) differ; set one of them".into(),
        ),
        (Some(t), _, None) => (t.into_bytes(), "NCCLPROBE_RENDEZVOUS_TOKEN"),
        (None, Some(s), None) => (s.into_bytes(), "NCCLPROBE_RENDEZVOUS_SECRET"),
        (None, None, Some(path)) => (read_file(&path)?, "NCCLPROBE_RENDEZVOUS_TOKEN_FILE"),
        (None, None, None) => return Ok(None),
    };
    Ok(Some(Token::new(&text, from)))
}

/// The token in `path`, once the file is shown to be the user's alone: a token others can read
/// is one they can use.
pub fn read_file(path: &str) -> Result<Vec<u8>, String> {
    use std::io::Read;
    use std::os::unix::fs::{MetadataExt, OpenOptionsExt};
    let named = format!("NCCLPROBE_RENDEZVOUS_TOKEN_FILE `{path}`");
    // Not blocking: a FIFO opened for reading would wait for a writer that may never come.
    let file = std::fs::OpenOptions::new()
        .read(true)
        .custom_flags(libc::O_NONBLOCK)
        .open(path)
        .map_err(|e| format!("{named} cannot be read ({e}); name a file that holds the token"))?;
    let meta = file
        .metadata()
        .map_err(|e| format!("{named}: cannot stat it ({e}); name a regular file"))?;
    if !meta.is_file() {
        return Err(format!(
            "{named} is not a regular file; name a file that holds the token"
        ));
    }
    // SAFETY: geteuid has no preconditions and cannot fail.
    let me = unsafe { libc::geteuid() };
    if meta.uid() != me {
        return Err(format!(
            "{named} belongs to user {} rather than this one ({me}); use a token file of your own",
            meta.uid()
        ));
    }
    if meta.mode() & 0o077 != 0 {
        return Err(format!(
            "{named} can be read or written by others (mode {:03o}); chmod 600 it",
            meta.mode() & 0o777
        ));
    }
    let mut text = Vec::new();
    file.take(MAX_TOKEN_FILE + 1)
        .read_to_end(&mut text)
        .map_err(|e| format!("{named} cannot be read ({e}); name a file that holds the token"))?;
    if text.len() as u64 > MAX_TOKEN_FILE {
        return Err(format!(
            "{named} is longer than {MAX_TOKEN_FILE} bytes; put only the token in it"
        ));
    }
    // `echo token > file` leaves a newline that the variable form would not have.
    while text.last().is_some_and(u8::is_ascii_whitespace) {
        text.pop();
    }
    if text.is_empty() {
        return Err(format!("{named} is empty; put the job's token in it"));
    }
    Ok(text)
}
