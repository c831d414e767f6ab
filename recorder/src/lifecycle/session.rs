//! The session: the fixed facts of this rank's recording (rank, settings, clock), set once at
//! init, and whether recording is on.

use std::sync::OnceLock;
use std::sync::atomic::{AtomicBool, Ordering};

use format::profile::ProfileStats;
use format::{ClockCalibration, Event, FileHeader};
use offload::config::Config;

use crate::clock;
use crate::front::{buffers, cost};

/// Fixed facts about this rank's recording, set once at init.
#[derive(Debug)]
pub struct Session {
    pub rank: u32,
    pub size: u32,
    pub thread_level: i32,
    pub config: Config,
    pub clock: ClockCalibration,
}

impl Session {
    /// What one clock read costs, in ticks (measured at init, kept in the clock's calibration).
    pub fn read_cost(&self) -> u64 {
        u64::from(self.clock.read_ticks)
    }

    /// The first output directory: where the rank's files start, and where the profile and the
    /// run's markers go.
    pub fn first_out_dir(&self) -> std::path::PathBuf {
        self.config
            .out
            .first()
            .cloned()
            .unwrap_or_else(|| offload::config::DEFAULT_OUT.into())
    }
}

/// The job's run id, which `evenflush run` and `wrap` give every rank (`EVENFLUSH_RUN_ID`); empty
/// when the recorder was preloaded by hand.
pub fn run_id() -> String {
    std::env::var("EVENFLUSH_RUN_ID").unwrap_or_default()
}

static SESSION: OnceLock<Session> = OnceLock::new();
static ACTIVE: AtomicBool = AtomicBool::new(false);

/// This rank's session, once `MPI_Init` started one.
pub fn session() -> Option<&'static Session> {
    SESSION.get()
}

/// Whether events are being recorded (between init and finalize).
pub fn active() -> bool {
    ACTIVE.load(Ordering::Relaxed)
}

/// Recording is over (the end has begun: nothing recorded from here on is written).
pub(crate) fn stop_recording() {
    ACTIVE.store(false, Ordering::Release);
}

/// Starts recording. Returns false (and stays inert) if a session already exists.
pub fn start_session(session: Session) -> bool {
    cost::arm(session.read_cost(), session.clock.ticks_per_sec);
    if SESSION.set(session).is_err() {
        return false;
    }
    if let Some(s) = SESSION.get()
        && s.config.mode == offload::config::Mode::Profile
    {
        buffers::enable_profile(profile_template(s));
    }
    ACTIVE.store(true, Ordering::Release);
    true
}

/// What every thread's profile statistics start from: the rank, the clock, and the names of all
/// wrapped functions (a thread may call MPI before it has seen any definition).
fn profile_template(s: &Session) -> ProfileStats {
    let mut p = ProfileStats::new(s.rank, s.size, 1e9 / s.clock.ticks_per_sec);
    for (id, (name, _)) in crate::functions::FUNCTIONS.iter().enumerate() {
        p.add_event(
            0,
            &Event::FunctionDef {
                id: id as format::FunctionId,
                name: (*name).to_string(),
            },
        );
    }
    p
}

/// Builds the rank file header for this session.
pub fn file_header(rank: u32, size: u32, clock: ClockCalibration) -> FileHeader {
    FileHeader {
        rank,
        world_size: size,
        part: 0,
        clock,
        created_unix_ns: clock::realtime_ns(),
        producer: format!("evenflush-recorder {}", env!("CARGO_PKG_VERSION")),
    }
}
