//! `alloc=<PYTORCH_CUDA_ALLOC_CONF>`: other allocator settings. Exact: the recorded trace is
//! replayed with them (nothing else changes in the program).

use super::{Context, Cost, CostKind, Method, Remedy, RemedyError};
use crate::allocator::AllocatorConfig;

/// Allocator settings as `PYTORCH_CUDA_ALLOC_CONF` takes them.
#[derive(Debug, Clone)]
pub struct Alloc {
    /// The string as given.
    pub conf: String,
    /// Parsed.
    pub config: AllocatorConfig,
}

impl Alloc {
    /// Parses the value (the error says what PyTorch would object to).
    pub fn parse(value: &str) -> Result<Alloc, String> {
        if value.is_empty() {
            return Err(
                "alloc= needs a PYTORCH_CUDA_ALLOC_CONF string, e.g. expandable_segments:True"
                    .into(),
            );
        }
        let config = AllocatorConfig::parse(value).map_err(|e| e.to_string())?;
        Ok(Alloc {
            conf: value.to_string(),
            config,
        })
    }
}

impl Remedy for Alloc {
    fn spec(&self) -> String {
        format!("alloc={}", self.conf)
    }

    fn order(&self) -> u8 {
        9
    }

    fn method(&self) -> Method {
        Method::Replay
    }

    fn apply(&self, ctx: &mut Context<'_>) -> Result<(), RemedyError> {
        ctx.config = Some(self.config.clone());
        Ok(())
    }

    fn cost(&self, _ctx: &Context<'_>) -> Cost {
        Cost {
            kind: CostKind::None,
            text: "none: allocator settings only".into(),
        }
    }

    fn change(&self, _ctx: &Context<'_>) -> String {
        format!(
            "export PYTORCH_CUDA_ALLOC_CONF={}   # in the environment, before the process starts (or os.environ[...] before the first CUDA allocation)",
            self.conf
        )
    }
}
