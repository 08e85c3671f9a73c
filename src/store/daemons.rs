//! Daemons sharing one store (`daemons`): who they are, their leases, and the fence every
//! write about a claimed prompt passes.
//!
//! Only a shared (PostgreSQL) store has rows here; on SQLite the one daemon needs no lease.
//! A daemon's *node* (`HOME/node.id`) names it across restarts; its *epoch*, bumped at each
//! registration, is the fencing token of every prompt it claims (`prompts.claim_epoch`). Its
//! lease (`lease_until`) is on the database's clock (`corral_now_ms()`), never a host's.
//!
//! Who writes: [`register`], [`renew`] and [`release`] run on the daemon's heartbeat
//! connection (`crate::lease`), the one exception to "only the ledger writes" besides the
//! checkpointer: renewing a lease must never queue behind a batch. They touch only the
//! daemon's own row. The ledger reads [`fence_holds`] inside its transaction (which holds the
//! store's write lock, `postgres::LOCK_WRITES`): a rescue of the daemon's prompts runs under
//! the same lock, so a write that passed the fence committed while its daemon owned them.

use serde::{Deserialize, Serialize};

use crate::store::sql::{self, args, Conn, Dialect, Row};

/// The claim a running prompt is held under on a shared store: the daemon's node and its
/// epoch when it claimed it. Every write about the prompt, its runs and its events carries it.
#[derive(Debug, Clone, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub struct Claim {
    pub node_id: String,
    pub epoch: i64,
}

/// A daemon that served, or serves, the store.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Daemon {
    pub node_id: String,
    pub epoch: i64,
    pub host: String,
    pub home: String,
    pub pid: i64,
    pub started_at: i64,
    /// When its lease ends, on the database's clock; `None`: it stopped cleanly.
    pub lease_until: Option<i64>,
    pub renewed_at: Option<i64>,
    /// The ids of the projects it serves (their paths are directories on its host).
    pub serves: Vec<String>,
    /// What it says of itself at each renewal (`running`, `fenced_writes`).
    pub status: serde_json::Value,
    /// The database's clock when this was read: `lease_until - now` is what is left.
    pub now: i64,
}

impl Daemon {
    /// Whether its lease holds now.
    pub fn is_live(&self) -> bool {
        self.lease_until.is_some_and(|until| until >= self.now)
    }
}

fn daemon_row(row: &Row<'_>) -> sql::Result<Daemon> {
    Ok(Daemon {
        node_id: row.get(0)?,
        epoch: row.get(1)?,
        host: row.get(2)?,
        home: row.get(3)?,
        pid: row.get(4)?,
        started_at: row.get(5)?,
        lease_until: row.get(6)?,
        renewed_at: row.get(7)?,
        serves: super::json_list(row.get(8)?),
        status: serde_json::from_str(&row.get::<String>(9)?).unwrap_or_default(),
        now: row.get(10)?,
    })
}

/// Who registers: this daemon, from its home.
#[derive(Debug, Clone)]
pub struct Registration {
    pub node_id: String,
    pub host: String,
    pub home: String,
    pub pid: u32,
    pub lease_ms: i64,
}

/// Registers the daemon and takes its lease; replies with its new epoch, or `None` when its
/// node holds a live lease from another host or home (the same home on two hosts, through a
/// shared filesystem whose locks do not hold). A daemon restarted on its own home and host
/// takes its node over at once: the home's lock it holds proves the previous one is dead.
pub fn register(conn: &Conn, registration: &Registration) -> sql::Result<Option<i64>> {
    conn.opt_row(
        "INSERT INTO daemons (node_id, epoch, host, home, pid, started_at, lease_until, renewed_at) \
         VALUES (?1, 1, ?2, ?3, ?4, ?5, corral_now_ms() + ?6, corral_now_ms()) \
         ON CONFLICT (node_id) DO UPDATE \
            SET epoch = daemons.epoch + 1, host = excluded.host, home = excluded.home, \
                pid = excluded.pid, started_at = excluded.started_at, \
                lease_until = excluded.lease_until, renewed_at = excluded.renewed_at, \
                status = '{}' \
          WHERE daemons.lease_until IS NULL OR daemons.lease_until < corral_now_ms() \
             OR (daemons.host = excluded.host AND daemons.home = excluded.home) \
         RETURNING epoch",
        args![
            registration.node_id,
            registration.host,
            registration.home,
            registration.pid as i64,
            super::now_ms(),
            registration.lease_ms,
        ],
        |row| row.get(0),
    )
}

/// What a renewal found.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Renewed {
    /// The new end of the lease, on the database's clock.
    pub lease_until: i64,
    /// The database's clock at the renewal.
    pub now: i64,
}

/// Renews the lease of `(node_id, epoch)` while it still holds; `None`: it was lost (expired,
/// or the node registered again elsewhere) and cannot be renewed: the daemon registers anew.
pub fn renew(
    conn: &Conn,
    claim: &Claim,
    lease_ms: i64,
    serves: &[String],
    status: &serde_json::Value,
) -> sql::Result<Option<Renewed>> {
    conn.opt_row(
        "UPDATE daemons SET lease_until = corral_now_ms() + ?3, renewed_at = corral_now_ms(), \
                serves = ?4, status = ?5 \
          WHERE node_id = ?1 AND epoch = ?2 AND lease_until >= corral_now_ms() \
         RETURNING lease_until, corral_now_ms()",
        args![
            claim.node_id,
            claim.epoch,
            lease_ms,
            serde_json::to_string(serves).expect("strings serialize"),
            status.to_string(),
        ],
        |row| {
            Ok(Renewed {
                lease_until: row.get(0)?,
                now: row.get(1)?,
            })
        },
    )
}

/// Gives the lease up at a clean stop (its prompts were requeued): nobody waits for it.
pub fn release(conn: &Conn, claim: &Claim) -> sql::Result<()> {
    conn.run(
        "UPDATE daemons SET lease_until = NULL WHERE node_id = ?1 AND epoch = ?2",
        args![claim.node_id, claim.epoch],
    )?;
    Ok(())
}

/// Every daemon that served the store, this one first if listed, then by host and home.
pub fn daemons(conn: &Conn) -> sql::Result<Vec<Daemon>> {
    if conn.dialect() == Dialect::Sqlite {
        return Ok(Vec::new());
    }
    conn.rows(
        "SELECT node_id, epoch, host, home, pid, started_at, lease_until, renewed_at, serves, \
                status, corral_now_ms() FROM daemons ORDER BY host, home, node_id",
        args![],
        daemon_row,
    )
}

/// How many other daemons hold a live lease now (inside a write transaction: as it began,
/// when it asked, `sql::TransactionMemo`).
pub fn others_live(conn: &Conn, node_id: &str) -> sql::Result<i64> {
    if let Some(count) = conn.known_others_live(node_id) {
        return Ok(count);
    }
    conn.row(
        "SELECT count(*) FROM daemons WHERE node_id <> ?1 AND lease_until >= corral_now_ms()",
        args![node_id],
        |row| row.get(0),
    )
}

/// How long until the first lease of another daemon that still claims running prompts runs
/// out (0: one has already), or `None` when none does: the moment to look for prompts to
/// rescue.
pub fn next_expiry(conn: &Conn, node_id: &str) -> sql::Result<Option<i64>> {
    let left: Option<i64> = conn.row(
        "SELECT min(CASE WHEN d.node_id IS NULL OR d.epoch <> p.claim_epoch \
                          OR d.lease_until IS NULL THEN 0 \
                         ELSE d.lease_until - corral_now_ms() END) \
           FROM prompts p LEFT JOIN daemons d ON d.node_id = p.claimed_by \
          WHERE p.status = 'running' AND p.claimed_by IS NOT NULL AND p.claimed_by <> ?1",
        args![node_id],
        |row| row.get(0),
    )?;
    Ok(left.map(|left| left.max(0)))
}

/// Whether `claim` still holds: its daemon's epoch is the same and its lease has not run out.
/// Read inside the ledger's transaction, under the store's write lock (see the module doc).
/// Asked once per transaction and claim: one that held holds to the commit (see
/// `sql::TransactionMemo`).
pub fn fence_holds(conn: &Conn, claim: &Claim) -> sql::Result<bool> {
    if conn.fence_known_held(&claim.node_id, claim.epoch) {
        return Ok(true);
    }
    let holds = conn
        .opt_row(
            "SELECT 1 FROM daemons WHERE node_id = ?1 AND epoch = ?2 \
                AND lease_until >= corral_now_ms()",
            args![claim.node_id, claim.epoch],
            |row| row.get::<i64>(0),
        )?
        .is_some();
    if holds {
        conn.note_fence_held(&claim.node_id, claim.epoch);
    }
    Ok(holds)
}

/// Whether a live daemon serves project `project_id` (as of its last renewal).
pub fn served_by_anyone(conn: &Conn, project_id: &str) -> sql::Result<bool> {
    if conn.dialect() == Dialect::Sqlite {
        return Ok(true);
    }
    conn.row(
        "SELECT EXISTS (SELECT 1 FROM daemons WHERE lease_until >= corral_now_ms() \
            AND ?1 IN (SELECT json_array_elements_text(serves::json)))",
        args![project_id],
        |row| row.get(0),
    )
}
