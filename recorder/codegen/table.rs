//! The table `mpi_functions.tsv` as rows: each parameter classified by its C declaration, each
//! role checked against the known keys and the row's parameters.

use std::collections::BTreeMap;

#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Kind {
    /// A choice buffer or other opaque pointer, forwarded untouched.
    Buf,
    Int,
    /// `int *`, `int[]`, `int[][3]`.
    IntPtr,
    /// An MPI handle by value; the string is the handle type without `MPI_`.
    Handle(String),
    /// Pointer to (or array of) MPI handles.
    HandlePtr(String),
    Aint,
    AintPtr,
    Offset,
    Status,
    /// `MPI_Count` by value, and pointer to (or array of) `MPI_Count`.
    Count,
    CountPtr,
    Str,
    /// `char *x[]`, `char **x[]`: arrays of strings (spawn commands and their arguments).
    StrArray,
    Argc,
    Argv,
    /// The `...` of `MPI_Pcontrol`: declared, never forwarded.
    VarArgs,
}

#[derive(Clone, Debug)]
pub struct Param {
    pub decl: String,
    pub name: String,
    pub kind: Kind,
}

#[derive(Clone, Debug)]
pub struct Func {
    pub id: u16,
    pub name: String,
    pub category: String,
    pub params: Vec<Param>,
    pub roles: BTreeMap<String, String>,
}

impl Func {
    pub fn role(&self, key: &str) -> Option<&str> {
        self.roles.get(key).map(String::as_str)
    }
    pub(super) fn param(&self, name: &str) -> &Param {
        self.params
            .iter()
            .find(|p| p.name == name)
            .unwrap_or_else(|| panic!("{}: role names unknown parameter {name}", self.name))
    }
    pub fn lower(&self) -> String {
        self.name.to_lowercase()
    }
}

pub const CATEGORIES: &[&str] = &[
    "init",
    "finalize",
    "abort",
    "p2p-blocking",
    "probe",
    "p2p-nonblocking",
    "persistent",
    "start",
    "completion",
    "request",
    "collective-blocking",
    "collective-nonblocking",
    "neighbor-blocking",
    "neighbor-nonblocking",
    "comm-query",
    "comm",
    "group",
    "io",
    "io-nonblocking",
    "rma-window",
    "rma-comm",
    "rma-sync",
    "persistent-collective",
    "partitioned",
    "session-init",
    "session-finalize",
    "session",
    "io-split",
    "dynamic",
    "fault-tolerance",
    "profiling",
];

const ROLE_KEYS: &[&str] = &[
    "comm",
    "peer",
    "tag",
    "root",
    "count",
    "type",
    "inplace",
    "vcounts",
    "req",
    "preq",
    "reqkind",
    "start",
    "startall",
    "n",
    "freereq",
    "ureq",
    "cancel",
    "complete",
    "wreq",
    "wreqs",
    "status",
    "statuses",
    "flag",
    "index",
    "outcount",
    "indices",
    "recvstatus",
    "newcomm",
    "freecomm",
    "dupcomm",
    "origin",
    "stringtag",
    "win",
    "newwin",
    "freewin",
    "group",
    "newmsg",
    "msg",
    "partitions",
    "level",
    "fortran",
    "rcount",
    "rtype",
    "rvcounts",
    "rmine",
    "rper",
    "rwhere",
    "rinplace",
];

fn classify(decl: &str) -> Result<Param, String> {
    let decl = decl.trim().to_string();
    if decl == "..." {
        return Ok(Param {
            decl,
            name: String::new(),
            kind: Kind::VarArgs,
        });
    }
    let (base, array) = match decl.find('[') {
        Some(i) => (decl[..i].trim(), true),
        None => (decl.as_str(), false),
    };
    let name_start = base
        .rfind(|c: char| !(c.is_ascii_alphanumeric() || c == '_'))
        .map_or(0, |i| i + 1);
    let name = base[name_start..].to_string();
    let ty = base[..name_start].replace("const", "").replace(' ', "");
    let ty = if array { format!("{ty}*") } else { ty };
    let kind = match ty.as_str() {
        "void*" => Kind::Buf,
        "int" => Kind::Int,
        "int*" => Kind::IntPtr,
        "MPI_Aint" => Kind::Aint,
        "MPI_Aint*" => Kind::AintPtr,
        "MPI_Offset" => Kind::Offset,
        "MPI_Count" => Kind::Count,
        "MPI_Count*" => Kind::CountPtr,
        "char**" => Kind::StrArray,
        "char***" if name != "argv" => Kind::StrArray,
        "MPI_Status*" => Kind::Status,
        "char*" => Kind::Str,
        "char***" => Kind::Argv,
        t if t.starts_with("MPI_") && t.ends_with('*') => {
            Kind::HandlePtr(t[4..t.len() - 1].to_string())
        }
        t if t.starts_with("MPI_") => Kind::Handle(t[4..].to_string()),
        _ => return Err(format!("unsupported parameter type in `{decl}`")),
    };
    let kind = if kind == Kind::IntPtr && name == "argc" {
        Kind::Argc
    } else {
        kind
    };
    Ok(Param { decl, name, kind })
}

pub fn parse(tsv: &str) -> Result<Vec<Func>, String> {
    let mut funcs = Vec::new();
    for (lineno, line) in tsv.lines().enumerate() {
        if line.starts_with('#') || line.trim().is_empty() {
            continue;
        }
        let cols: Vec<&str> = line.split('\t').collect();
        if cols.len() < 3 {
            return Err(format!(
                "line {}: expected 4 tab-separated columns",
                lineno + 1
            ));
        }
        let name = cols[0].trim().to_string();
        let category = cols[1].trim().to_string();
        if !CATEGORIES.contains(&category.as_str()) {
            return Err(format!("line {}: unknown category {category}", lineno + 1));
        }
        let params = if cols[2].trim().is_empty() {
            Vec::new()
        } else {
            cols[2]
                .split(',')
                .map(classify)
                .collect::<Result<Vec<_>, _>>()
                .map_err(|e| format!("line {}: {e}", lineno + 1))?
        };
        let mut roles = BTreeMap::new();
        for item in cols.get(3).copied().unwrap_or("").split_whitespace() {
            let (k, v) = item
                .split_once('=')
                .ok_or_else(|| format!("line {}: role `{item}` lacks `=`", lineno + 1))?;
            if !ROLE_KEYS.contains(&k) {
                return Err(format!("line {}: unknown role {k}", lineno + 1));
            }
            roles.insert(k.to_string(), v.to_string());
        }
        let id = u16::try_from(funcs.len()).map_err(|_| "too many functions".to_string())?;
        let f = Func {
            id,
            name,
            category,
            params,
            roles,
        };
        for (k, v) in &f.roles {
            if !matches!(
                k.as_str(),
                "complete" | "reqkind" | "fortran" | "rper" | "rwhere" | "origin"
            ) && !f.params.iter().any(|p| &p.name == v)
            {
                return Err(format!("{}: role {k} names unknown parameter {v}", f.name));
            }
        }
        funcs.push(f);
    }
    Ok(funcs)
}
