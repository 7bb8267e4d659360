//! Build script: `sqlx::migrate!` embeds `../migrations/*.sql` at compile time, so a new or changed
//! migration must rebuild the crate.

fn main() {
    println!("cargo:rerun-if-changed=../migrations");
}
