//! TensorFlow's out-of-memory text: `[Resource exhausted: ]OOM when allocating tensor with
//! shape[128,3,8,128,8,128] and type float on /job:localhost/replica:0/task:0/device:GPU:0 by
//! allocator GPU_0_bfc[ [Op:…]]`, and the very old `OOM when allocating tensor of shape
//! [563354,256] and type float`. The exception (`ResourceExhaustedError`) is printed before it on
//! the same line, or lines above it ("2 root error(s) found.", "Graph execution error:"); see
//! `Log::exception_before`. Spec: `reference/pytorch-allocator-spec.md` D.4.
//!
//! The message gives no sizes; the requested bytes are the shape's element count × the dtype's
//! size, when the dtype has a fixed size (`None` for `string`, `resource`, `variant`, unknown
//! names, or an element count that overflows).

use std::sync::LazyLock;

use regex::Regex;

use super::{Dialect, Found, Framework, OomMessage, regex};

static OOM_WHEN_ALLOCATING: LazyLock<Regex> = LazyLock::new(|| {
    regex(concat!(
        r"(?:Resource exhausted: )?OOM when allocating tensor (?:with|of) shape\s*\[(?P<shape>[0-9,\s]*)\] ",
        r"and type (?P<dtype>[A-Za-z0-9_]+)",
        r"(?: on (?P<device>[^\s\]]+) by allocator (?P<allocator>[A-Za-z0-9_]+))?",
        r"(?:\s*\[Op:[^\]\s]+\])?",
    ))
});

static GPU_OF_DEVICE: LazyLock<Regex> = LazyLock::new(|| regex(r"GPU:([0-9]{1,4})$"));

/// Appends every TensorFlow out-of-memory message found in `flat`.
pub(crate) fn find(flat: &str, out: &mut Vec<Found>) {
    for c in OOM_WHEN_ALLOCATING.captures_iter(flat) {
        let Some(whole) = c.get(0) else { continue };
        let mut msg = OomMessage::new(Framework::Tensorflow, Dialect::TfOomWhenAllocating);
        let shape = c.name("shape").and_then(|m| parse_shape(m.as_str()));
        let dtype = c.name("dtype").map(|m| m.as_str().to_string());
        msg.requested_bytes = shape
            .as_deref()
            .zip(dtype.as_deref())
            .and_then(|(shape, dtype)| tensor_bytes(shape, dtype));
        msg.gpu_index = c
            .name("device")
            .and_then(|d| GPU_OF_DEVICE.captures(d.as_str()))
            .and_then(|g| g.get(1)?.as_str().parse().ok());
        msg.tensor_shape = shape;
        msg.dtype = dtype;
        out.push(Found {
            span: whole.range(),
            msg,
        });
    }
}

/// "128,3, 8" → [128, 3, 8]; "" → [] (a scalar).
fn parse_shape(s: &str) -> Option<Vec<u64>> {
    s.split(',')
        .map(str::trim)
        .filter(|d| !d.is_empty())
        .map(|d| d.parse().ok())
        .collect()
}

/// Bytes of a dense tensor: element count × element size; `None` if the dtype has no fixed size
/// or the product overflows.
fn tensor_bytes(shape: &[u64], dtype: &str) -> Option<u64> {
    let elements = shape.iter().try_fold(1u64, |n, &d| n.checked_mul(d))?;
    elements.checked_mul(dtype_size(dtype)?)
}

/// Size in bytes of one element of a TensorFlow dtype, by the name `DataTypeString` prints.
fn dtype_size(dtype: &str) -> Option<u64> {
    Some(match dtype {
        "bool" | "int8" | "uint8" | "qint8" | "quint8" | "float8_e4m3fn" | "float8_e5m2"
        | "float8_e4m3fnuz" | "float8_e4m3b11fnuz" | "float8_e5m2fnuz" => 1,
        "half" | "bfloat16" | "int16" | "uint16" | "qint16" | "quint16" => 2,
        "float" | "int32" | "uint32" | "qint32" => 4,
        "double" | "int64" | "uint64" | "complex64" => 8,
        "complex128" => 16,
        _ => return None,
    })
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::super::parse_oom_log;
    use super::*;

    #[test]
    fn shapes_dtypes_and_bytes() {
        // (text, shape, dtype, requested, gpu)
        let cases = [
            (
                "OOM when allocating tensor with shape[2,3] and type half on \
                 /job:localhost/replica:0/task:0/device:GPU:1 by allocator GPU_1_bfc",
                vec![2, 3],
                "half",
                Some(12),
                Some(1),
            ),
            (
                "OOM when allocating tensor of shape [10, 10] and type int64",
                vec![10, 10],
                "int64",
                Some(800),
                None,
            ),
            (
                "OOM when allocating tensor with shape[] and type float",
                vec![],
                "float",
                Some(4),
                None,
            ),
            (
                "OOM when allocating tensor with shape[5] and type string",
                vec![5],
                "string",
                None,
                None,
            ),
            (
                "OOM when allocating tensor with shape[4294967296,4294967296,2] and type float",
                vec![4_294_967_296, 4_294_967_296, 2],
                "float",
                None,
                None,
            ),
        ];
        for (text, shape, dtype, req, gpu) in cases {
            let all = parse_oom_log(text);
            assert_eq!(all.len(), 1, "{text}");
            let m = &all[0];
            assert_eq!(m.framework, Framework::Tensorflow);
            assert_eq!(m.tensor_shape.as_deref(), Some(&shape[..]), "{text}");
            assert_eq!(m.dtype.as_deref(), Some(dtype), "{text}");
            assert_eq!(m.requested_bytes, req, "{text}");
            assert_eq!(m.gpu_index, gpu, "{text}");
        }
    }

    #[test]
    fn dtype_table() {
        assert_eq!(dtype_size("bfloat16"), Some(2));
        assert_eq!(dtype_size("complex128"), Some(16));
        assert_eq!(dtype_size("resource"), None);
    }
}
