//! One connection to one server: establishment with the handshake, and
//! command round trips. One buffer per connection, reused; one write per
//! message. Any I/O failure, and any protocol error in a reply
//! (`wire::check_reply`), breaks the connection so the pool drops it: a
//! half-read or garbled reply must never be read as the next one. The exception (cmap.rs)
//! is a read that timed out after the request was fully written: the
//! connection is then *pending* and its reply is drained before any reuse.
//!
//! Wire compression (`wire::compression`): a connection whose handshake
//! offered compressors reads OP_COMPRESSED replies, and one whose server
//! accepted one sends every command in it but those the spec never
//! compresses. The compressed side of a message lives in a second buffer,
//! made only then; the message is still written in one call.

use crate::auth::{self, Authenticator, HelloAuth, Step};
use crate::cmap::{PendingResponse, ALIVENESS_PROBE};
use crate::deadline::Deadline;
use crate::error::{check_ok, Error, ErrorKind, Result};
use crate::handshake::{self, HelloReply};
use crate::runtime::{self, Stream};
use crate::versioned_api::ServerApi;
use crate::wire;
use bson::{RawDocument, RawDocumentBuf};
use std::rc::Rc;
use std::sync::atomic::{AtomicI32, Ordering};
use std::sync::Arc;
use std::time::Duration;

static NEXT_REQUEST_ID: AtomicI32 = AtomicI32::new(1);

/// A new connection's buffer: most requests and replies fit.
const INITIAL_BUFFER: usize = 16 * 1024;

/// The first read of a reply asks for the length and body together: twice
/// the connection's last reply, within these bounds (the host zeroes what
/// is asked before reading into it, so asking far more than comes costs).
const FIRST_READ_MIN: usize = 4 * 1024;
const FIRST_READ_MAX: usize = 64 * 1024;

/// The compression buffer keeps at most this much between messages.
const SPARE_KEEP_CAPACITY: usize = 1 << 20;

pub fn next_request_id() -> i32 {
    NEXT_REQUEST_ID.fetch_add(1, Ordering::Relaxed)
}

pub struct Connection {
    /// Plain TCP, or TLS over it.
    stream: Stream,
    /// The message being sent, then its reply (and nothing after it).
    buf: Vec<u8>,
    /// The other side of a compressed message (empty without compression):
    /// the message is built in `buf`, compressed here, and the two swapped,
    /// so `buf` is always what goes on, or came off, the wire last.
    spare: Vec<u8>,
    /// The compressor the handshake negotiated, with zlib's level.
    compressor: Option<(wire::Compressor, Option<i32>)>,
    /// Whether the handshake offered compressors: only then may a reply come
    /// compressed (a server may compress even the handshake's reply).
    compression_offered: bool,
    /// How much the first read of the next reply asks for.
    first_read: usize,
    /// Driver-side id, unique per client.
    pub id: u64,
    /// The pool generation it was created in (cleared pools drop older ones).
    pub generation: u64,
    pub address: String,
    pub hello: HelloReply,
    broken: bool,
    /// A reply still due (cmap.rs): drained before the next request.
    pending: Option<PendingResponse>,
    /// The handshake's reply and the conversation its hello began, while
    /// authentication is still to run: a server check's connection
    /// authenticates at its first checkout.
    unauthenticated: Option<(RawDocumentBuf, Option<auth::Suspended>)>,
    /// While checked out: its place among its pool's connections in use.
    pub(crate) lease: Option<crate::cmap::Lease>,
    /// When it last became available in its pool (kept only with maxIdleTimeMS).
    pub(crate) available_since: crate::deadline::Instant,
    /// A monitor's streaming hello: the requestID the next reply answers
    /// (the request's, then each reply's in turn) while more are to come.
    streaming: Option<i32>,
    /// The buffer holds the start of the next reply (read with the one
    /// before it): `receive` goes on from there.
    carried: bool,
    /// A checkout whose end waits for the first command to be sent behind
    /// the proof (topology.rs `end_deferred_checkout`).
    pub(crate) deferred: Option<DeferredCheckout>,
}

/// A command to send: its request id, body and OP_MSG document sequences.
pub type Outgoing<'a> = (i32, &'a RawDocument, &'a [(&'a str, &'a [u8])]);

/// What a checkout left for its end (CMAP event durations; the bound of
/// the authentication it finishes).
#[derive(Debug, Clone, Copy)]
pub(crate) struct DeferredCheckout {
    pub checkout_started: crate::deadline::Instant,
    pub created: crate::deadline::Instant,
    pub selection: Deadline,
}

/// What every new connection needs besides its address, derived once per
/// client from the URI and client options (TLS, credentials and the Stable
/// API join the metadata here).
#[derive(Debug, Clone, Default)]
pub struct ConnectSettings {
    /// The handshake's `client` document.
    pub metadata: RawDocumentBuf,
    /// The declared Stable API: its fields go on the handshake too, and it
    /// rules out the legacy `isMaster` fallback.
    pub server_api: Option<ServerApi>,
    /// The DNS servers that resolved `mongodb+srv`: asked first for host names.
    pub name_servers: Vec<std::net::SocketAddr>,
    /// The credential and its SCRAM key cache, shared by the client's connections.
    pub auth: Option<Rc<Authenticator>>,
    /// TLS verifies the server's chain and host name (no `tlsInsecure`,
    /// `tlsAllowInvalidCertificates` or `tlsAllowInvalidHostnames`).
    pub server_verified: bool,
    /// TLS for every connection when set: one rustls configuration per client.
    pub tls: Option<Arc<rustls::ClientConfig>>,
    /// The loadBalanced URI option: every hello says so, and every reply must
    /// name the mongos behind the load balancer (`load_balancer`).
    pub load_balanced: bool,
    /// The `compressors` offered in the handshake, and `zlibCompressionLevel`.
    pub compression: wire::Compression,
}

/// When a new connection authenticates.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum AuthWhen {
    /// A server check's connection: after its hello (and its speculative
    /// start) it waits for its first checkout (`finish_handshake`).
    AtCheckout,
    /// A pool connection: before it is ready.
    Now,
    /// A pool connection opened for a read: as `Now`, unless the read may
    /// follow the proof (`may_send_behind_proof`); it then waits, as
    /// `AtCheckout`, for `send_behind_proof`.
    NowOrWithRead,
}

/// What establishing a connection measured.
pub struct Established {
    pub conn: Connection,
    pub rtt: Duration,
    /// The hello's reply (heartbeat log messages show it).
    pub reply: RawDocumentBuf,
}

impl Connection {
    /// Connects (TCP, and TLS if the settings say so) within `connect`, then
    /// runs the handshake and authenticates within `handshake`, when
    /// `auth_when` says (else authentication stops after the hello and its
    /// speculative start, and `finish_handshake` or `send_behind_proof`
    /// must run before any command). `prepared`: a transport already open
    /// to `address` (topology/prepare.rs), used instead of connecting.
    #[allow(clippy::too_many_arguments)]
    pub async fn establish(
        address: &str,
        host: &str,
        port: u16,
        settings: &ConnectSettings,
        id: u64,
        generation: u64,
        (connect, handshake): (Deadline, Deadline),
        auth_when: AuthWhen,
        prepared: Option<Stream>,
    ) -> Result<Established> {
        let authenticate = auth_when != AuthWhen::AtCheckout;
        // A pool's connection (`authenticate`): its failures before
        // authentication are labelled overloads (CMAP backpressure).
        let label = |e: Error| match authenticate {
            true => crate::cmap::label_establishment_error(e),
            false => e,
        };
        let stream = match prepared {
            Some(stream) => stream,
            None => Stream::connect(
                address,
                host,
                port,
                &settings.name_servers,
                settings.tls.as_ref(),
                connect,
            )
            .await
            .map_err(label)?,
        };
        let deadline = handshake;
        let mut conn = Connection {
            stream,
            buf: Vec::with_capacity(INITIAL_BUFFER),
            spare: Vec::new(),
            compressor: None,
            compression_offered: !settings.compression.compressors.is_empty(),
            first_read: FIRST_READ_MIN,
            id,
            generation,
            address: address.to_string(),
            // Until the server says otherwise, the protocol's default limits apply.
            hello: HelloReply {
                max_message_size_bytes: wire::DEFAULT_MAX_MESSAGE_SIZE,
                ..Default::default()
            },
            broken: false,
            pending: None,
            unauthenticated: None,
            lease: None,
            available_since: crate::deadline::Instant(0),
            streaming: None,
            carried: false,
            deferred: None,
        };
        let auth = settings.auth.as_deref();
        let hello_auth = auth.map(|a| a.hello_fields(new_nonce)).transpose()?;
        let started = runtime::now();
        let reply = match conn
            .hello(settings, hello_auth.as_ref(), false, deadline)
            .await
        {
            Err(e) if handshake::wants_legacy_fallback(&e, settings.server_api.is_some()) => {
                conn.hello(settings, hello_auth.as_ref(), true, deadline)
                    .await
            }
            other => other,
        }
        .map_err(|e| match auth {
            Some(a) if e.kind == ErrorKind::Server => a.hello_failed(e),
            _ => label(in_handshake(e, address)),
        })?;
        let rtt = runtime::now().since(started);
        conn.hello = HelloReply::parse(&reply)?;
        conn.compressor = settings
            .compression
            .negotiate(&reply)
            .map(|c| (c, settings.compression.zlib_level));
        if authenticate {
            // Never authenticate to a server this driver cannot use. A
            // server check's hello goes to SDAM first (topology.rs), which
            // records the incompatible server for selection to fail on.
            conn.hello.check_wire_version(address)?;
        }
        if settings.load_balanced {
            crate::load_balancer::check_hello(&conn.hello)?;
        }
        match (auth, hello_auth) {
            // An arbiter holds no users: nothing to authenticate (auth spec).
            _ if conn.hello.arbiter_only => {}
            (Some(a), Some(h)) => {
                let suspended = h.suspend();
                let waits = match auth_when {
                    AuthWhen::AtCheckout => true,
                    AuthWhen::Now => false,
                    AuthWhen::NowOrWithRead => auth::command_may_follow_proof(
                        settings.server_verified,
                        suspended.as_ref(),
                        &reply,
                        true,
                    ),
                };
                match waits {
                    true => conn.unauthenticated = Some((reply.clone(), suspended)),
                    false => {
                        conn.authenticate(a, a.resume(suspended), &reply, deadline)
                            .await?
                    }
                }
            }
            _ => {}
        }
        Ok(Established { conn, rtt, reply })
    }

    /// Runs the authentication a server check's connection left for later
    /// (nothing when it is done), within `deadline`. A failure breaks the connection.
    pub async fn finish_handshake(
        &mut self,
        settings: &ConnectSettings,
        deadline: Deadline,
    ) -> Result<()> {
        let (Some((reply, suspended)), Some(auth)) =
            (self.unauthenticated.take(), settings.auth.as_deref())
        else {
            return Ok(());
        };
        let r = self
            .authenticate(auth, auth.resume(suspended), &reply, deadline)
            .await;
        self.fail_on_err(r)
    }

    /// The auth conversation, continued from the hello's speculative answer
    /// when there is one. Its round trips share the establishment deadline.
    async fn authenticate(
        &mut self,
        auth: &Authenticator,
        hello: HelloAuth<'_>,
        reply: &RawDocument,
        deadline: Deadline,
    ) -> Result<()> {
        let (conversation, step) = auth.after_hello(hello, reply, new_nonce)?;
        self.converse(conversation, step, deadline).await
    }

    /// The conversation from `step` on, to its end.
    async fn converse(
        &mut self,
        mut conversation: auth::Conversation<'_>,
        mut step: Step,
        deadline: Deadline,
    ) -> Result<()> {
        loop {
            let Some(cmd) = next_message(&mut conversation, step, deadline).await? else {
                return Ok(());
            };
            let request_id = next_request_id();
            let sent = self.send(request_id, &cmd, &[], deadline).await;
            let reply = match sent {
                Ok(()) => self.receive(request_id, deadline).await,
                Err(e) => Err(e),
            };
            let reply = reply
                .map_err(|e| in_section(e, &format!("authentication with {}", self.address)))?;
            step = conversation.reply(&reply)?;
        }
    }

    /// Authentication is left for its first checkout or its first command.
    pub fn awaits_authentication(&self) -> bool {
        self.unauthenticated.is_some()
    }

    /// Whether this connection's first command may ride behind the proof
    /// of the authentication its check left for later (`read_only`: the
    /// command has no side effect). The rule is `auth::command_may_follow_proof`.
    pub fn may_send_behind_proof(&self, settings: &ConnectSettings, read_only: bool) -> bool {
        let Some((reply, suspended)) = &self.unauthenticated else {
            return false;
        };
        settings.auth.is_some()
            && auth::command_may_follow_proof(
                settings.server_verified,
                suspended.as_ref(),
                reply,
                read_only,
            )
    }

    /// Finishes the authentication a server check's connection left for
    /// later with its first command in the same write, behind the SCRAM
    /// proof (`may_send_behind_proof` said it may). The server's signature
    /// is checked (`deadline` bounds the derivation, the write and that
    /// reply) before the command's reply is read. `Ok(true)`: authenticated,
    /// and `receive` reads the command's reply; `Ok(false)`: authenticated,
    /// the command still to send (the server wanted one more, empty,
    /// exchange, so the command ran before authentication ended and failed:
    /// its reply was dropped).
    pub async fn send_behind_proof(
        &mut self,
        auth: &Authenticator,
        (request_id, body, sequences): Outgoing<'_>,
        deadline: Deadline,
    ) -> Result<bool> {
        let Some((reply, suspended)) = self.unauthenticated.take() else {
            return Ok(false);
        };
        let r = async {
            let (mut conversation, step) =
                auth.after_hello(auth.resume(suspended), &reply, new_nonce)?;
            let proof = next_message(&mut conversation, step, deadline).await?;
            let Some(proof) = proof else {
                // Nothing more to send: an ordinary first command.
                return Ok(false);
            };
            let proof_id = next_request_id();
            let mut first = Vec::new();
            let max = self.max_message_size();
            wire::encode_op_msg(&mut first, proof_id, 0, &proof, &[], max)?;
            self.encode(request_id, body, sequences)?;
            self.buf.splice(0..0, first);
            self.flush_buf(deadline).await?;
            let answer = self.receive_followed(proof_id, deadline).await;
            let answer = answer
                .map_err(|e| in_section(e, &format!("authentication with {}", self.address)))?;
            match conversation.reply(&answer)? {
                Step::Done => Ok(true),
                next => {
                    // The command went before authentication ended.
                    self.receive(request_id, deadline).await?;
                    self.converse(conversation, next, deadline).await?;
                    Ok(false)
                }
            }
        }
        .await;
        self.fail_on_err(r)
    }

    async fn hello(
        &mut self,
        settings: &ConnectSettings,
        auth: Option<&HelloAuth<'_>>,
        legacy: bool,
        deadline: Deadline,
    ) -> Result<RawDocumentBuf> {
        let mut cmd =
            handshake::hello_command(&settings.metadata, legacy, settings.server_api.as_ref());
        if settings.load_balanced {
            cmd.append(bson::cstr!("loadBalanced"), true);
        }
        handshake::append_compression(&mut cmd, &settings.compression.compressors);
        if let Some(a) = auth {
            handshake::append_auth(
                &mut cmd,
                a.sasl_supported_mechs.as_deref(),
                a.speculative.as_deref(),
            );
        }
        self.exchange_hello(&cmd, legacy, deadline).await
    }

    /// A server check on this established connection (an SDAM heartbeat):
    /// a hello without the handshake's metadata. Returns the round trip; the
    /// connection's `hello` becomes the new reply.
    pub async fn heartbeat(
        &mut self,
        settings: &ConnectSettings,
        deadline: Deadline,
    ) -> Result<(Duration, RawDocumentBuf)> {
        let cmd = handshake::heartbeat_command(settings.server_api.as_ref());
        let started = runtime::now();
        let reply = self.exchange_hello(&cmd, false, deadline).await?;
        let rtt = runtime::now().since(started);
        let hello = HelloReply::parse(&reply)?;
        hello.check_wire_version(&self.address)?;
        self.hello = hello;
        Ok((rtt, reply))
    }

    /// The streaming protocol (server-monitoring spec): sends the awaitable
    /// hello `cmd` with exhaustAllowed; its replies come by `next_streamed`.
    pub async fn start_stream(&mut self, cmd: &RawDocument, deadline: Deadline) -> Result<()> {
        let request_id = next_request_id();
        self.buf.clear();
        // Never compressed: a hello is on the compression spec's list.
        wire::encode_op_msg(
            &mut self.buf,
            request_id,
            wire::EXHAUST_ALLOWED,
            cmd,
            &[],
            wire::DEFAULT_MAX_MESSAGE_SIZE,
        )?;
        self.flush_buf(deadline).await?;
        // The buffer holds what was sent: the replies start from nothing.
        self.buf.clear();
        self.streaming = Some(request_id);
        Ok(())
    }

    /// Whether the server streams its hello replies on this connection
    /// (the last one came with moreToCome).
    pub fn is_streaming(&self) -> bool {
        self.streaming.is_some()
    }

    /// The next reply of the streaming hello, and whether more follow (the
    /// moreToCome flag; without it, the monitor sends the next awaitable
    /// hello). Bytes read past the reply stay for the next one. Any failure
    /// (a timeout included: the stream's place is lost) breaks the connection.
    pub async fn next_streamed(&mut self, deadline: Deadline) -> Result<(RawDocumentBuf, bool)> {
        let Some(response_to) = self.streaming.take() else {
            return Err(Error::protocol("no hello is streaming on this connection"));
        };
        let r = self.read_frame(deadline).await.and_then(|len| {
            let (reply, (more, id)) = self.take_frame_keeping_rest(len, |frame| {
                let (range, more, id) = wire::check_streamed_reply(frame, response_to)?;
                Ok((range, (more, id)))
            })?;
            check_ok(&reply)?;
            let hello = HelloReply::parse(&reply)?;
            hello.check_wire_version(&self.address)?;
            Ok((reply, hello, more.then_some(id)))
        });
        let (reply, hello, next) = self.fail_on_err(r)?;
        self.hello = hello;
        self.streaming = next;
        Ok((reply, next.is_some()))
    }

    async fn exchange_hello(
        &mut self,
        cmd: &RawDocument,
        legacy: bool,
        deadline: Deadline,
    ) -> Result<RawDocumentBuf> {
        let request_id = next_request_id();
        self.buf.clear();
        let op_code = if legacy { wire::OP_QUERY } else { wire::OP_MSG };
        if legacy {
            wire::encode_op_query(&mut self.buf, request_id, "admin", cmd);
        } else {
            wire::encode_op_msg(
                &mut self.buf,
                request_id,
                0,
                cmd,
                &[],
                wire::DEFAULT_MAX_MESSAGE_SIZE,
            )?;
        }
        self.flush_buf(deadline).await?;
        let reply = self.receive_as(request_id, op_code, deadline).await?;
        check_ok(&reply)?;
        Ok(reply)
    }

    pub fn is_broken(&self) -> bool {
        self.broken
    }

    pub fn pending(&self) -> Option<PendingResponse> {
        self.pending
    }

    /// Gives up on a pending reply: the connection is closed when dropped or checked in.
    pub fn abandon_pending(&mut self) {
        if self.pending.take().is_some() {
            self.broken = true;
        }
    }

    /// The aliveness check of a connection pending past its window: reads
    /// what is already buffered (at most one more byte of the frame).
    /// `Ok(true)` when a byte came, and the window restarts.
    pub async fn probe_pending(&mut self) -> Result<bool> {
        let Some(mut pending) = self.pending else {
            return Ok(true);
        };
        let now = runtime::now();
        let want = self.buf.len() + 1;
        match self
            .stream
            .read_up_to(
                &mut self.buf,
                want,
                want,
                Deadline::after(now, ALIVENESS_PROBE),
            )
            .await
        {
            Ok(()) => {
                pending.alive(runtime::now(), self.buf.len());
                self.pending = Some(pending);
                Ok(true)
            }
            Err(e) if e.is_timeout() => Ok(false),
            Err(e) => {
                self.broken = true;
                Err(e)
            }
        }
    }

    /// Reads the rest of the pending reply by `deadline` and discards it,
    /// after checking that it answers the outstanding request. A timeout
    /// leaves the connection pending (cmap.rs decides what then); any other
    /// failure breaks it.
    pub async fn drain_pending(&mut self, deadline: Deadline) -> Result<()> {
        let Some(pending) = self.pending else {
            return Ok(());
        };
        let mut unsolicited = false;
        let r = self.read_frame(deadline).await.and_then(|len| {
            unsolicited = self.buf.len() > len;
            let len = self.decompress_buf(len)?;
            match wire::check_reply(&self.buf[..len], pending.request_id, wire::OP_MSG) {
                Ok(_) => Ok(()),
                Err(mut e) => {
                    e.message = format!("drained {}", e.message);
                    Err(e)
                }
            }
        });
        match &r {
            Ok(()) => {
                self.pending = None;
                // Bytes after the drained reply answer nothing: closed at check-in.
                self.broken |= unsolicited;
                self.buf.clear();
                self.buf.shrink_to(INITIAL_BUFFER);
            }
            Err(e) if e.is_timeout() => {}
            Err(_) => {
                self.pending = None;
                self.broken = true;
            }
        }
        r
    }

    pub fn max_message_size(&self) -> usize {
        self.hello.max_message_size_bytes
    }

    /// Sends one OP_MSG in one write, compressed when the handshake
    /// negotiated a compressor and the command may be.
    pub async fn send(
        &mut self,
        request_id: i32,
        body: &RawDocument,
        sequences: &[(&str, &[u8])],
        deadline: Deadline,
    ) -> Result<()> {
        self.encode(request_id, body, sequences)?;
        self.flush_buf(deadline).await
    }

    /// The OP_MSG into the buffer, compressed when negotiated and allowed.
    fn encode(
        &mut self,
        request_id: i32,
        body: &RawDocument,
        sequences: &[(&str, &[u8])],
    ) -> Result<()> {
        let max = self.max_message_size();
        self.buf.clear();
        wire::encode_op_msg(&mut self.buf, request_id, 0, body, sequences, max)?;
        if let Some((compressor, zlib_level)) = self.compressor {
            let name = match body.iter().next() {
                Some(Ok((key, _))) => key.as_str(),
                _ => "",
            };
            if wire::compression::may_compress(name)
                && wire::compression::compress(
                    &self.buf,
                    compressor,
                    zlib_level,
                    max,
                    &mut self.spare,
                )?
            {
                std::mem::swap(&mut self.buf, &mut self.spare);
                self.spare.clear();
                self.trim_spare();
            }
        }
        Ok(())
    }

    /// When the frame of `len` bytes in the buffer is an OP_COMPRESSED
    /// reply, replaces it with the message it carries (bounded by
    /// maxMessageSizeBytes) and returns that message's length; bytes read
    /// past the frame are dropped (the caller has noted them). A compressed
    /// reply on a connection that offered no compressor is a protocol error
    /// (`wire::decode` says so).
    fn decompress_buf(&mut self, len: usize) -> Result<usize> {
        if !self.compression_offered || !wire::compression::is_compressed(&self.buf[..len]) {
            return Ok(len);
        }
        let max = self.max_message_size();
        wire::compression::decompress(&self.buf[..len], max, &mut self.spare)?;
        std::mem::swap(&mut self.buf, &mut self.spare);
        self.spare.clear();
        self.trim_spare();
        Ok(self.buf.len())
    }

    /// A spare buffer grown for one large message does not stay.
    fn trim_spare(&mut self) {
        if self.spare.capacity() > SPARE_KEEP_CAPACITY {
            self.spare = Vec::new();
        }
    }

    async fn flush_buf(&mut self, deadline: Deadline) -> Result<()> {
        let r = self.stream.write_all(&self.buf, deadline).await;
        self.fail_on_err(r)
    }

    /// Reads the reply to OP_MSG `request_id`; the reads for it share
    /// `deadline`. The request was fully written, so a timeout leaves the
    /// connection pending (its reply is still due) rather than broken; any
    /// other failure (a protocol error among them) breaks it.
    pub async fn receive(&mut self, request_id: i32, deadline: Deadline) -> Result<RawDocumentBuf> {
        self.receive_as(request_id, wire::OP_MSG, deadline).await
    }

    /// `receive` for a request sent as `op_code` (OP_MSG, or OP_QUERY).
    async fn receive_as(
        &mut self,
        request_id: i32,
        op_code: i32,
        deadline: Deadline,
    ) -> Result<RawDocumentBuf> {
        if !std::mem::take(&mut self.carried) {
            self.buf.clear();
        }
        let mut unsolicited = false;
        let r = self.read_frame(deadline).await.and_then(|len| {
            unsolicited = self.buf.len() > len;
            let len = self.decompress_buf(len)?;
            let range = wire::check_reply(&self.buf[..len], request_id, op_code)?;
            wire::take_document(&mut self.buf, range)
        });
        match &r {
            Err(e) if e.is_timeout() => {
                let read = self.buf.len();
                self.pending = Some(PendingResponse::timed_out(request_id, read, runtime::now()));
            }
            Err(_) => self.broken = true,
            // Bytes after the reply answer nothing the driver sent: the reply
            // stands, and the connection is closed at check-in.
            Ok(_) if unsolicited => self.broken = true,
            Ok(_) => {}
        }
        let reply = r?;
        // Checking a large reply costs time in its size too (47 MB of tiny
        // documents: tens of milliseconds): one read in time but checked past
        // the deadline is late. The connection read all of it and stays clean.
        if crate::csot::decoding_is_checked(reply.as_bytes().len()) {
            deadline.check(runtime::now(), "reply decoding")?;
        }
        Ok(reply)
    }

    /// Reads the reply to `request_id` when the reply to another request
    /// follows it: bytes read past it stay for the next `receive`.
    async fn receive_followed(
        &mut self,
        request_id: i32,
        deadline: Deadline,
    ) -> Result<RawDocumentBuf> {
        self.buf.clear();
        let len = self.read_frame(deadline).await?;
        let (reply, ()) = self.take_frame_keeping_rest(len, |frame| {
            Ok((wire::check_reply(frame, request_id, wire::OP_MSG)?, ()))
        })?;
        self.carried = true;
        Ok(reply)
    }

    /// The document of the frame of `len` bytes at the buffer's start,
    /// decompressed and checked by `check` (where its document lies, and
    /// what else it says); bytes read past the frame stay in the buffer,
    /// the start of the next reply.
    fn take_frame_keeping_rest<T>(
        &mut self,
        len: usize,
        check: impl FnOnce(&[u8]) -> Result<(std::ops::Range<usize>, T)>,
    ) -> Result<(RawDocumentBuf, T)> {
        let rest = self.buf.split_off(len);
        let len = self.decompress_buf(len)?;
        let (range, said) = check(&self.buf[..len])?;
        let reply = wire::take_document(&mut self.buf, range)?;
        self.buf.clear();
        self.buf.extend_from_slice(&rest);
        Ok((reply, said))
    }

    /// Reads one frame into the buffer, resuming after what it already holds;
    /// returns the frame's length. The first read takes the length and
    /// (usually) the whole body; anything read past the frame stays after
    /// it in the buffer. The buffer grows once, to exactly the frame (at
    /// most `wire::MAX_MESSAGE_SIZE`), and a heap that cannot give that much
    /// is an error, not a trap.
    async fn read_frame(&mut self, deadline: Deadline) -> Result<usize> {
        if self.buf.len() < 4 {
            let first = self.first_read;
            self.stream
                .read_up_to(&mut self.buf, 4, first, deadline)
                .await?;
        }
        let prefix = [self.buf[0], self.buf[1], self.buf[2], self.buf[3]];
        let len = wire::frame_length(prefix, self.max_message_size())?;
        if self.buf.len() < len {
            self.buf
                .try_reserve_exact(len - self.buf.len())
                .map_err(|e| {
                    Error::protocol(format!("no memory for a reply of {len} bytes")).with_cause(e)
                })?;
            self.stream
                .read_up_to(&mut self.buf, len, len, deadline)
                .await?;
        }
        self.first_read = len.saturating_mul(2).clamp(FIRST_READ_MIN, FIRST_READ_MAX);
        Ok(len)
    }

    fn fail_on_err<T>(&mut self, r: Result<T>) -> Result<T> {
        if r.is_err() {
            self.broken = true;
        }
        r
    }
}

/// The conversation's next command (with `$db`), after the key derivation
/// `step` may call for; `None` when it is done. PBKDF2 runs in slices: the
/// deadline is checked before each (a server may ask for 10,000,000
/// iterations: seconds of CPU), and the other tasks run between them on WASI 0.3.
async fn next_message(
    conversation: &mut auth::Conversation<'_>,
    mut step: Step,
    deadline: Deadline,
) -> Result<Option<RawDocumentBuf>> {
    loop {
        match step {
            Step::Done => return Ok(None),
            Step::Send(mut cmd) => {
                cmd.append(bson::cstr!("$db"), conversation.db());
                return Ok(Some(cmd));
            }
            Step::Derive => {
                deadline.check(runtime::now(), "SCRAM key derivation (PBKDF2)")?;
                step = conversation.derive(auth::scram::ITERATIONS_PER_SLICE)?;
                if step == Step::Derive {
                    runtime::yield_now().await;
                }
            }
        }
    }
}

/// A SCRAM client nonce from wasi:random.
fn new_nonce() -> String {
    auth::nonce_from(&runtime::random_bytes(auth::NONCE_BYTES))
}

fn in_handshake(e: Error, address: &str) -> Error {
    in_section(e, &format!("connection handshake with {address}"))
}

/// A timeout names the section of establishment that was waiting (the
/// socket's own message becomes the cause); other errors pass unchanged.
fn in_section(e: Error, section: &str) -> Error {
    if e.is_timeout() {
        let cause = e.message.clone();
        Error::timeout(section).with_cause(cause)
    } else {
        e
    }
}
