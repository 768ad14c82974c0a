//! The command line of `a2acp` (clap): every subcommand, its flags and their help.

use std::path::PathBuf;

use a2acp_runtime::cli::{DevCaArgs, RelayArgs, RelayKeyCmd, RelayStatusArgs, RunArgs};
use clap::{Parser, Subcommand};

#[derive(Parser)]
#[command(
    name = "a2acp",
    version,
    about = "a2acp — personal agents that negotiate context for you through a blind relay",
    long_about = "a2acp — personal agents that negotiate context for you through a blind relay.\n\n\
Try it:            a2acp demo\n\
Run a relay:       a2acp relay --listen 127.0.0.1:7447 --domain localhost --data ./relay-data\n\
Create an agent:   a2acp agent init --address agent:alice@localhost --relay ws://127.0.0.1:7447 --home ./alice\n\
Run it:            a2acp agent run --home ./alice\n\
Talk to it:        a2acp --home ./alice thread start --to agent:bob@localhost --category scheduling --summary \"Dinner on Friday\"\n\
A group thread:    a2acp --home ./alice thread start --to agent:bob@localhost --to agent:carol@localhost --category group_scheduling --summary \"Game night\"\n\n\
Commands that talk to a running agent use --home (or $A2ACP_HOME; default ~/.local/share/a2acp)."
)]
pub(crate) struct Cli {
    /// The agent's directory (config.toml, identity.key, agent.db, agent.sock).
    #[arg(long, global = true)]
    pub(crate) home: Option<PathBuf>,
    #[command(subcommand)]
    pub(crate) cmd: Cmd,
}

// Parsed once per process: the size of the relay's flags does not matter.
#[allow(clippy::large_enum_variant)]
#[derive(Subcommand)]
pub(crate) enum Cmd {
    /// Run a relay: registry and offline queue in SQLite, /healthz and /metrics on the same port.
    Relay(RelayArgs),
    /// The federating relay's signing key: show it, or rotate it (the old key signs the new).
    #[command(subcommand)]
    RelayKey(RelayKeyCmd),
    /// A running relay's figures: connections, queues, refusals and each federated
    /// domain's links, queue, traffic and reputation (read from its /metrics).
    RelayStatus(RelayStatusArgs),
    /// A private CA and a relay certificate signed by it, to run TLS relays (and
    /// federation) on one machine or a private network.
    DevCa(DevCaArgs),
    /// Create or run your agent.
    #[command(subcommand)]
    Agent(AgentCmd),
    /// Start or show a thread.
    #[command(subcommand)]
    Thread(ThreadCmd),
    /// List your agent's threads.
    Threads {
        /// Machine-readable output.
        #[arg(long)]
        json: bool,
    },
    /// List open prompts.
    Prompts {
        /// Machine-readable output.
        #[arg(long)]
        json: bool,
    },
    /// Answer a prompt without the terminal: `answer 3 confirm`, `answer 3 alternative 2`, `answer 1 transport_mode cuisine_preference=no`.
    Answer {
        /// The prompt's number (see `a2acp prompts`).
        prompt_id: u64,
        /// Resolution: confirm | different-time | different-place | excuse [REASON] | decline | alternative N.
        /// Consent: share-all | decline-all | FIELD (share) | FIELD=no | FIELD=VALUE.
        #[arg(required = true, trailing_var_arg = true, allow_hyphen_values = true)]
        choice: Vec<String>,
    },
    /// Show or change permission tiers (§7).
    #[command(subcommand)]
    Permissions(PermCmd),
    /// Block an agent: its packets are dropped and its threads declined.
    Block {
        /// The agent, e.g. agent:mallory@localhost.
        address: String,
    },
    /// Unblock an agent.
    Unblock {
        /// The agent.
        address: String,
    },
    /// What your agent knows about the agents it talks to.
    #[command(subcommand)]
    Memory(MemoryCmd),
    /// Shared context spaces (§12): create one, show it, write a field, see its history.
    #[command(subcommand)]
    Space(SpaceCmd),
    /// Your agent's suggestions (§7.2, e.g. "always share dietary with Bob?"); `suggestions accept N` takes one.
    Suggestions {
        #[command(subcommand)]
        cmd: Option<SuggestionsCmd>,
        /// Machine-readable output.
        #[arg(long)]
        json: bool,
    },
    /// Your signed consent receipts: what was shared or declined, with whom, for what and
    /// what decided it, and each proposal you confirmed; `receipts verify FILE` checks
    /// them offline.
    Receipts {
        #[command(subcommand)]
        cmd: Option<ReceiptsCmd>,
        /// Only this thread's receipts.
        #[arg(long)]
        thread: Option<String>,
        /// Machine-readable output (what `receipts verify` reads).
        #[arg(long)]
        json: bool,
    },
    /// The agreements of the proposals you confirmed: each proposal with every signed
    /// confirmation it needed (`receipts verify FILE` checks `agreements --json` too).
    Agreements {
        /// Only this thread's agreements.
        #[arg(long)]
        thread: Option<String>,
        /// Machine-readable output (what `receipts verify` reads).
        #[arg(long)]
        json: bool,
    },
    /// What you took back: each retraction, from whom, and whether the other agent
    /// acknowledged deleting it, signed (`receipts verify FILE` checks `retractions --json`
    /// too).
    Retractions {
        /// Only this thread's retractions.
        #[arg(long)]
        thread: Option<String>,
        /// Machine-readable output (what `receipts verify` reads).
        #[arg(long)]
        json: bool,
    },
    /// What your agent told you: unread notifications (numbered), or mark them read.
    Notifications {
        /// `read N` or `read --all`.
        #[command(subcommand)]
        cmd: Option<NotificationsCmd>,
        /// Read ones too.
        #[arg(long)]
        all: bool,
        /// Machine-readable output.
        #[arg(long)]
        json: bool,
    },
    /// Check (safety number, as digits and a QR code) and accept another agent's identity key (§16).
    #[command(subcommand)]
    Keys(KeysCmd),
    /// Your agent's address, key and connection.
    Status {
        /// Machine-readable output.
        #[arg(long)]
        json: bool,
    },
    /// The spec's dinner example over real sockets in one process (no setup needed);
    /// `--group`: the spec's game night for four (§10.2), a group thread.
    Demo {
        /// Answer Alice's prompts yourself (one key per choice).
        #[arg(long)]
        interactive: bool,
        /// The game night for four: Alice's agent coordinates a group thread with Bob,
        /// Charlie and Diana.
        #[arg(long)]
        group: bool,
        /// Both agents decide with the language model of this OpenAI-compatible API
        /// (`http://127.0.0.1:8080/v1`, `https://api.openai.com/v1`…) instead of the
        /// deterministic negotiator.
        #[arg(long, value_name = "URL", conflicts_with = "group")]
        llm: Option<String>,
        /// The model to ask (with `--llm`).
        #[arg(long, value_name = "NAME", requires = "llm", default_value = "default")]
        model: String,
        /// How the server is told the answer's JSON schema (with `--llm`): json_schema
        /// (OpenAI), json_object_schema (llama-cpp-python), ollama, none.
        #[arg(
            long,
            value_name = "SHAPE",
            requires = "llm",
            default_value = "json_schema"
        )]
        structured_output: String,
        /// The environment variable holding the API key (with `--llm`), e.g. OPENAI_API_KEY.
        #[arg(long, value_name = "VAR", requires = "llm")]
        api_key_env: Option<String>,
    },
    /// Serve your running agent to an MCP host (Claude Desktop, an IDE…) over stdio, or
    /// over streamable HTTP with --listen (§17): its threads, prompts and permissions as
    /// tools and resources.
    Mcp {
        /// Your host shows you every tool call before it runs: prompts are answered with
        /// what the call says instead of asking you through the host.
        #[arg(long)]
        host_answers: bool,
        /// Serve streamable HTTP at http://ADDR/mcp instead of stdio (e.g. 127.0.0.1:8765;
        /// port 0 picks one, printed on stdout). Loopback only unless --token-file.
        #[arg(long, value_name = "ADDR")]
        listen: Option<String>,
        /// A file whose first line is the bearer token every HTTP request must carry
        /// (at least 16 characters); required off loopback.
        #[arg(long, value_name = "FILE", requires = "listen")]
        token_file: Option<PathBuf>,
    },
    /// The A2A Phase-1 envelope (seed 001): send one message to an agent's
    /// `POST /a2a/messages` with the seed's retries, or show your agent's Phase-1 id.
    #[command(subcommand)]
    Phase1(Phase1Cmd),
    /// Your audit log (seed 004 §6): every message your agent sent or received, one line
    /// each, from the files in <home>/audit/ (the agent need not run); `audit verify`
    /// checks the hash chain and names the first broken line.
    Audit {
        #[command(subcommand)]
        cmd: Option<AuditCmd>,
        /// Only messages with this agent (address or id) or principal.
        #[arg(long)]
        peer: Option<String>,
        /// Only this thread (or space).
        #[arg(long)]
        thread: Option<String>,
        /// Only this month (YYYY-MM).
        #[arg(long)]
        month: Option<String>,
        /// Only sent or received messages.
        #[arg(long, value_parser = ["sent", "received"])]
        direction: Option<String>,
        /// Machine-readable output (the entries as they are stored).
        #[arg(long)]
        json: bool,
    },
    /// Benchmarks.
    #[command(subcommand)]
    Bench(BenchCmd),
}

#[derive(Subcommand)]
pub(crate) enum AuditCmd {
    /// Check the hash chain of every month file: exit status 1 and the first broken line
    /// (file and line number) if a line was altered, deleted, moved or cut short.
    Verify {
        /// Machine-readable output.
        #[arg(long)]
        json: bool,
    },
}

#[derive(Subcommand)]
pub(crate) enum Phase1Cmd {
    /// Send one Phase-1 message and wait for its acknowledgement: at most 3 attempts, 1 s
    /// then 2 s apart, retried only on TIMEOUT, INTERNAL_ERROR, HTTP 5xx, 429 and network
    /// failures. Each attempt is told on stderr, the receiver's answer printed on stdout.
    /// Exit status: 0 acknowledged, 2 refused (the error code is named), 3 gave up, 4 an
    /// answer that is not the acknowledgement.
    #[command(
        after_help = "Example: a2acp phase1 send http://127.0.0.1:7410 --to 6f1c2b3a-4d5e-4f60-8a7b-9c0d1e2f3a4b --type ping --payload '{\"nonce\": \"n-1\"}'"
    )]
    Send {
        /// The receiver: its base URL (`http://127.0.0.1:7410`) or its `/a2a/messages`
        /// endpoint.
        url: String,
        /// The receiving agent's Phase-1 id, a UUID v4 (`a2acp phase1 id` on its side).
        #[arg(long)]
        to: String,
        /// The message type: task_assignment, status_update, task_completion, ping, error.
        #[arg(long = "type", value_name = "TYPE")]
        kind: String,
        /// The payload: a JSON object inline (starting with `{`) or the path of a JSON file
        /// holding one.
        #[arg(long, value_name = "{JSON}|FILE.json")]
        payload: String,
        /// Your Phase-1 id (a UUID v4); by default your agent's (from the identity key in
        /// --home), else a random one.
        #[arg(long)]
        from: Option<String>,
        /// A file whose first line is the bearer token the receiver requires.
        #[arg(long, value_name = "FILE")]
        token_file: Option<PathBuf>,
    },
    /// Your agent's Phase-1 id (a UUID v4 made from its public key): what a Phase-1 sender
    /// puts in `to` to reach it at its `--a2a-listen` address.
    Id,
}

#[derive(Subcommand)]
pub(crate) enum AgentCmd {
    /// Create an agent: identity key (mode 0600) and config.toml with the onboarding
    /// defaults of §14.1; registers with the relay if it is reachable. Without --address
    /// it runs the §14.1 onboarding: name, area, time zone (detected) and the five
    /// permission defaults are asked in the terminal (or read one per line from stdin
    /// when it is not a terminal).
    Init {
        /// The agent's address, agent:NAME@RELAY-DOMAIN (absent: asked).
        #[arg(long)]
        address: Option<String>,
        /// The relay, ws://HOST:PORT, or wss://HOST[:PORT] for a relay serving TLS
        /// (required with --address; absent: asked). Repeat it for a relay of several
        /// nodes (`--relay wss://a.example.org --relay wss://b.example.org`): the agent
        /// uses the first it reaches and moves to the next when one is unreachable.
        #[arg(long, value_name = "URL")]
        relay: Vec<String>,
        /// For a wss:// relay whose certificate is issued by a private CA (or is
        /// self-signed): that CA's certificate(s), PEM. Trusted besides the web PKI roots;
        /// its absolute path is written to config.toml as `relay_ca`.
        #[arg(long)]
        ca: Option<PathBuf>,
        /// Your name, for the profile.
        #[arg(long)]
        name: Option<String>,
        /// Your time zone (IANA, e.g. Europe/London), for the profile.
        #[arg(long)]
        timezone: Option<String>,
        /// More profile fields from a TOML file (key = value lines).
        #[arg(long)]
        profile: Option<PathBuf>,
        /// Do not contact the relay now (registration happens on the first `agent run`).
        #[arg(long)]
        offline: bool,
        /// Make no recovery key (tests, demos, throwaway agents): without one a lost
        /// identity key loses the address for good. `a2acp agent recovery-key` makes one
        /// later.
        #[arg(long)]
        no_recovery: bool,
        /// The recovery words without their QR code.
        #[arg(long)]
        no_qr: bool,
        /// Machine-readable output: one JSON object (the recovery words included) on stdout.
        #[arg(long)]
        json: bool,
    },
    /// Make a new recovery key for this agent, shown once as 24 words (and a QR code): it
    /// replaces the one bound at the relay. For a person who lost their words but still
    /// has the device. The agent may run (it binds the key at once) or not (at its next
    /// run).
    RecoveryKey {
        /// The words without their QR code.
        #[arg(long)]
        no_qr: bool,
        /// Machine-readable output: one JSON object, the words included.
        #[arg(long)]
        json: bool,
    },
    /// On a new device, when the old one (and its identity key) is lost: move your
    /// address to a new identity key with your 24 recovery words. The home (--home) is
    /// set up for `a2acp agent run`; your contacts' agents halt their threads with you and
    /// ask their person to compare safety numbers before they accept the new key.
    Recover {
        /// The address to recover, agent:NAME@DOMAIN.
        #[arg(long)]
        address: String,
        /// The 24 recovery words, in order (absent: read from stdin, which keeps them out
        /// of the shell's history and the process list).
        #[arg(long, value_name = "WORDS")]
        recovery: Option<String>,
        /// The relay the address is on, ws://HOST:PORT or wss://HOST[:PORT] (repeat it
        /// for a relay of several nodes). Needed for a new home; a restored home keeps
        /// its own.
        #[arg(long, value_name = "URL")]
        relay: Vec<String>,
        /// For a wss:// relay whose certificate is issued by a private CA: that CA's
        /// certificate(s), PEM.
        #[arg(long)]
        ca: Option<PathBuf>,
        /// Machine-readable output (also for a refusal, with a non-zero exit code).
        #[arg(long)]
        json: bool,
    },
    /// Run the agent: connect, keep threads going, show prompts, serve the control socket.
    Run(RunArgs),
    /// Write an encrypted backup of the agent (identity key, config, every thread, memory,
    /// audit log) under a passphrase (Argon2id, XChaCha20-Poly1305): asked on the
    /// terminal, or A2ACP_PASSPHRASE, or --passphrase-file. Safe while the agent runs.
    Backup {
        /// Where to write it.
        #[arg(long)]
        out: PathBuf,
        /// A file whose first line is the passphrase.
        #[arg(long)]
        passphrase_file: Option<PathBuf>,
    },
    /// Restore a backup into a new home (--home, absent or empty): the agent resumes every
    /// thread there; the old device, if it comes back, is replaced at the relay.
    Restore {
        /// The backup file.
        file: PathBuf,
        /// A file whose first line is the passphrase.
        #[arg(long)]
        passphrase_file: Option<PathBuf>,
    },
}

#[derive(Subcommand)]
pub(crate) enum ThreadCmd {
    /// Ask your agent to start a thread with another agent, or a group thread with
    /// several (repeat --to; your agent coordinates).
    Start {
        /// The other agent; repeated (`--to A --to B …`, up to 15), a group thread your
        /// agent coordinates. Or a plain A2A agent: its agent card's URL
        /// (`https://…/.well-known/agent-card.json`) or base URL (§18). Or an ACP agent
        /// (seed 004): `acp:<agent-id>`, reached through the `[acp]` gateway.
        #[arg(long, required = true)]
        to: Vec<String>,
        /// Intent category, e.g. scheduling.
        #[arg(long)]
        category: String,
        /// What it is about, in one line.
        #[arg(long)]
        summary: String,
        /// Context you give: a path to a JSON file holding an object (e.g.
        /// examples/dinner.json), or the object itself inline (starting with `{`). Shared
        /// in this thread except never_share fields.
        #[arg(long, value_name = "FILE.json|{JSON}")]
        context: Option<String>,
        /// Urgent: shorter staleness timeout.
        #[arg(long)]
        urgent: bool,
        /// A group thread only: how many confirmations (yours included) settle it; by
        /// default everyone the proposal names must confirm.
        #[arg(long)]
        quorum: Option<u32>,
        /// A group thread only: ask for confirmations one after the other, you first, then
        /// in the order of --to; between two steps your agent checks its bookings, and what
        /// it finds may change what the next person is asked (§8.3).
        #[arg(long, conflicts_with = "quorum")]
        sequential: bool,
    },
    /// Give a thread new context, or answer its escalation ("I need your input…"): the
    /// negotiation goes on. `thread reply thr_… day=Thursday time=19:00`.
    #[command(alias = "context")]
    Reply {
        /// Thread id.
        id: String,
        /// FIELD=VALUE pairs (a value that reads as JSON is taken as JSON, else as text).
        values: Vec<String>,
        /// Values as a JSON object: a path to a file holding one, or the object itself
        /// inline (starting with `{`), e.g. '{"day": "Thursday"}'.
        #[arg(long, value_name = "FILE.json|{JSON}")]
        context: Option<String>,
    },
    /// Cancel a thread: it closes (DECLINED) and the other agent is told.
    Cancel {
        /// Thread id.
        id: String,
    },
    /// Take back what you shared in a thread: the other agent deletes it (from the thread
    /// and its memory) and confirms, signed; if it does not within a day, you are told.
    Retract {
        /// Thread id.
        id: String,
        /// The fields to take back (default: everything you shared in the thread).
        fields: Vec<String>,
    },
    /// Change what a thread is about (§6.5): `thread update-intent thr_… --summary "Game
    /// night with friends on Friday" --need game_preferences`. The other agent is told;
    /// whatever your tiers would share for the new intent but not for the old one is
    /// asked first (a prompt).
    UpdateIntent {
        /// Thread id.
        id: String,
        /// What it is about now, in one line.
        #[arg(long)]
        summary: String,
        /// The new category (default: the thread's).
        #[arg(long = "type", alias = "category")]
        category: Option<String>,
        /// Why, shown to the other person.
        #[arg(long)]
        reason: Option<String>,
        /// A field the new intent needs from the other side (repeat, at most 5).
        #[arg(long = "need")]
        needs: Vec<String>,
    },
    /// Split a thread into threads that negotiate independently (§6.5): `thread fork thr_…
    /// --intent "Dinner reservation for Friday 19:00" --intent "Game night venue for Friday
    /// 21:00"`. Each inherits the thread's context and permissions and negotiates around
    /// what its siblings hold.
    Fork {
        /// Thread id.
        id: String,
        /// One new thread's summary (repeat: 2 to 8).
        #[arg(long = "intent", required = true)]
        intents: Vec<String>,
        /// Their category (default: the thread's).
        #[arg(long = "type", alias = "category")]
        category: Option<String>,
    },
    /// Hand a group thread you coordinate to one of its participants (§10.3).
    Transfer {
        /// The group's id (grp_…).
        id: String,
        /// The participant who coordinates from now on.
        #[arg(long)]
        to: String,
    },
    /// One thread in detail.
    Show {
        /// Thread id.
        id: String,
        /// Machine-readable output.
        #[arg(long)]
        json: bool,
    },
}

#[derive(Subcommand)]
pub(crate) enum ReceiptsCmd {
    /// Check receipts, agreements and retractions offline, without the agent: FILE holds
    /// one of them or the list `a2acp receipts --json`, `a2acp agreements --json` or
    /// `a2acp retractions --json` writes. Exit status 1 when any check fails (a retraction
    /// not acknowledged is reported as such, not counted as verified, and does not fail).
    Verify {
        /// The receipt, agreement or retraction file.
        file: PathBuf,
        /// The key every receipt must be signed by (base64url, as `a2acp keys show` prints it).
        #[arg(long)]
        key: Option<String>,
        /// FIELD=VALUE: check that VALUE is the value disclosed for FIELD (needs the salts
        /// `receipts --json` keeps); repeatable.
        #[arg(long = "value")]
        values: Vec<String>,
        /// ADDRESS=KEY: in an agreement, ADDRESS's confirmation must be signed by KEY, in a
        /// retraction ADDRESS's acknowledgement (base64url, e.g. the key you checked with
        /// `a2acp keys`); repeatable.
        #[arg(long = "signer")]
        signers: Vec<String>,
    },
}

#[derive(Subcommand)]
pub(crate) enum NotificationsCmd {
    /// Mark a notification read (its number from `a2acp notifications`), or all of them.
    Read {
        /// The notification's number.
        #[arg(required_unless_present = "all")]
        number: Option<u64>,
        /// Every notification.
        #[arg(long, conflicts_with = "number")]
        all: bool,
    },
}

#[derive(Subcommand)]
pub(crate) enum KeysCmd {
    /// Your key, the key pinned for ADDR, a changed key waiting, and the safety number to
    /// compare with the other person (60 digits and a QR code).
    Show {
        /// The other agent, e.g. agent:bob@localhost.
        address: String,
        /// Digits only, no QR code.
        #[arg(long)]
        no_qr: bool,
        /// Machine-readable output.
        #[arg(long)]
        json: bool,
    },
    /// Move your address to a new identity key: the relay installs a statement your old
    /// and new keys both sign, and every agent you know re-pins it without halting a
    /// thread. Waits for the relay's answer.
    Rotate {
        /// Machine-readable output (also for a refusal, with a non-zero exit code).
        #[arg(long)]
        json: bool,
    },
    /// Accept the changed key of ADDR after comparing safety numbers with its user.
    Accept {
        /// The other agent.
        address: String,
        /// The 60 digits the other person's device shows: nothing is accepted unless they match.
        #[arg(long)]
        safety_number: Option<String>,
    },
}

#[derive(Subcommand)]
pub(crate) enum PermCmd {
    /// Tiers, relationship overrides, blocked agents.
    Show {
        /// Machine-readable output.
        #[arg(long)]
        json: bool,
    },
    /// Put a field or category in a tier (always_share, ask_first, never_share).
    Set {
        /// Field or category, e.g. dietary, specific_availability.
        field: String,
        /// always_share | ask_first | never_share.
        tier: String,
        /// Only for this agent (relationship override: always_share or never_share).
        #[arg(long = "for")]
        for_peer: Option<String>,
    },
    /// Set the rule a field's or category's values travel with: the receiving agent
    /// uses them only for what the thread is about, deletes them after a while, or
    /// passes them to no one else.
    Rule {
        /// Field or category, e.g. dietary, specific_location.
        field: String,
        /// Only for what the thread it is shared in is about.
        #[arg(long)]
        purpose: bool,
        /// Deleted this long after sharing: 90m, 12h, 30d.
        #[arg(long)]
        expires_after: Option<String>,
        /// Passed to no one else.
        #[arg(long)]
        no_reshare: bool,
        /// Remove the rule.
        #[arg(long, conflicts_with_all = ["purpose", "expires_after", "no_reshare"])]
        clear: bool,
    },
}

#[derive(Subcommand)]
pub(crate) enum SuggestionsCmd {
    /// Accept suggestion N (as listed): e.g. always share that field with that agent.
    Accept {
        /// The suggestion's number.
        id: u64,
    },
    /// Dismiss suggestion N: not listed any more, never suggested again.
    Dismiss {
        /// The suggestion's number.
        id: u64,
    },
}

#[derive(Subcommand)]
pub(crate) enum SpaceCmd {
    /// Create a space with other agents: `space create "Family trip" --with agent:bob@localhost=write_own_fields --with agent:carol@localhost`.
    Create {
        /// What it is about.
        name: String,
        /// A participant: ADDRESS or ADDRESS=PERMISSION (read_all, write_own_fields, full_write; default full_write). Repeat for each.
        #[arg(long = "with", required = true)]
        with: Vec<String>,
        /// Initial fields: a JSON object inline or the path of a JSON file.
        #[arg(long)]
        context: Option<String>,
        /// Machine-readable output.
        #[arg(long)]
        json: bool,
    },
    /// One space's fields, or every space without an id.
    Show {
        /// The space (`spc_…`).
        id: Option<String>,
        /// Machine-readable output.
        #[arg(long)]
        json: bool,
    },
    /// Write a field: `space set spc_… hotel "Alfama Suites"`, `space set spc_… ~/arrival 18:00` (an own field), `space set spc_… itinerary --link https://…`, or no value to clear it.
    Set {
        /// The space.
        id: String,
        /// The field (`~/NAME`: your own field).
        field: String,
        /// The value: JSON if it parses, else text.
        value: Option<String>,
        /// A link to an external resource instead of a value.
        #[arg(long)]
        link: Option<String>,
        /// The link's title.
        #[arg(long)]
        title: Option<String>,
    },
    /// Every update of a space, oldest first.
    History {
        /// The space.
        id: String,
        /// Machine-readable output.
        #[arg(long)]
        json: bool,
    },
}

#[derive(Subcommand)]
pub(crate) enum MemoryCmd {
    /// What the agent pins, knows and remembers per agent (relationship memory, §11).
    Show {
        /// One agent.
        address: Option<String>,
        /// Machine-readable output.
        #[arg(long)]
        json: bool,
    },
    /// Set a remembered value about an agent's user (e.g. their dietary needs changed).
    Edit {
        /// The agent.
        address: String,
        /// The field, e.g. dietary.
        field: String,
        /// The value.
        value: String,
    },
    /// Forget one remembered field of an agent, or everything about it (its memory, what
    /// was learnt of it, its ended threads).
    Forget {
        /// The agent.
        address: String,
        /// Only this field.
        field: Option<String>,
    },
    /// Write all memory (or one agent's) as NDJSON (seed 002 §10.3), hashes preserved.
    Export {
        /// Only this agent.
        address: Option<String>,
        /// Write to this file instead of standard output.
        #[arg(long)]
        out: Option<std::path::PathBuf>,
    },
    /// Import memory from an NDJSON file: all lines or none.
    Import {
        /// The file.
        file: std::path::PathBuf,
    },
}

#[derive(Subcommand)]
pub(crate) enum BenchCmd {
    /// Load a real relay on loopback with N authenticated agents sending signed packets.
    Relay(a2acp_tokio::bench::BenchArgs),
    /// Hostile clients (garbage, slowloris, half-open, one-source flood) against a relay
    /// process under a low open-files limit: its fds, memory and CPU before, during and
    /// after, and an honest negotiation's time during the attack against its baseline.
    Attack(a2acp_tokio::bench::attack::AttackArgs),
    /// Two federating relays on loopback (child processes): cross-domain against
    /// same-domain latency and CPU per packet at a fixed rate, and the time to deliver a
    /// backlog after a partition between the relays.
    Federation(a2acp_tokio::bench::federation::FederationBenchArgs),
    /// One relay on SQLite, then relay nodes on a NATS cluster (yours: --nats), the agents
    /// spread over them, then every packet crossing nodes: latency and CPU per packet of
    /// the relays and the NATS servers at a fixed rate.
    Cluster(a2acp_tokio::bench::cluster::ClusterBenchArgs),
    /// The bare WebSocket forwarder the relay benchmark compares with (started by it).
    #[command(hide = true)]
    Forwarder(a2acp_tokio::bench::ForwarderArgs),
}
