# Sourced by tools/run_tests.sh and tests/kill_resume.sh: small Fashion-MNIST files cut from the real ones.
#   idx_head SRC_DIR DST_DIR NAME N HEADER_BYTES ITEM_BYTES
# writes the first N samples of SRC_DIR/NAME (or NAME.gz) to DST_DIR/NAME, with the sample count in the IDX
# header rewritten to N.
idx_head() {
  local src="$1/$3" full="$2/$3.full"
  [ -f "$src" ] || src="$src.gz"
  gzip -dcf "$src" >"$full"
  { head -c 4 "$full"  # magic
    printf "$(printf '\\x%02x\\x%02x\\x%02x\\x%02x' $(($4 >> 24 & 255)) $(($4 >> 16 & 255)) $(($4 >> 8 & 255)) $(($4 & 255)))"
    head -c $(($5 + $4 * $6)) "$full" | tail -c +9; } >"$2/$3"  # other dims, then N samples
  rm "$full"
}
