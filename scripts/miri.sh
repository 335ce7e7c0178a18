#!/usr/bin/env bash
# Runs the core's unit tests under Miri (nightly), which checks every
# unsafe block they reach for undefined behaviour: out-of-bounds and
# misaligned accesses, use after free, invalid values, aliasing
# violations. Miri interprets the code a thousand times slower or more,
# so the tests that take more than ~10 ms natively are skipped (the
# SKIP list below: the long model and eviction runs, whose unsafe paths
# the quick tests reach too), and so are those Miri cannot run: a heap in
# a file or a count of resident pages (it has no fstatvfs, mmap of files or mincore) and the
# statistical hash test. About 30-45 minutes on one core.
# Installs the nightly toolchain's miri and rust-src components if needed.
set -euo pipefail
cd "$(dirname "$0")/.."
rustup +nightly component add miri rust-src >/dev/null
SKIP=(
    batch::tests::plain_reads_in_a_batch_match_direct_execution
    builder::tests::default_table_follows_the_items_held
    builder::tests::prefault_makes_the_heap_resident_before_the_first_write
    cache::tests::a_full_heap_grows_its_table_when_items_turn_small
    cache::tests::a_small_table_grows_while_the_heap_has_room
    cache::tests::compaction_moves_runs_of_items_with_their_bytes_intact
    cache::tests::reads_answer_alike_settled_growing_and_with_a_flush_pending
    cache::tests::segments_of_more_tiny_items_than_the_merge_scratch_holds_are_evicted_whole
    cache::tests::split_segments_survive_a_restart_with_their_windows
    cache::tests::table_grows_past_hash_power_for_small_items
    cache::tests::writes_tell_apart_keys_whose_entries_look_alike
    clock::tests::a_ttl_item_is_never_served_at_or_after_its_deadline_on_the_system_clock
    clock::tests::system_clock_starts_at_zero_and_follows_real_time
    eviction::tests::a_hot_set_of_nine_tenths_of_the_heap_stays
    eviction::tests::a_key_back_from_the_ghosts_is_promoted
    eviction::tests::a_key_written_twice_but_never_read_passes_probation
    eviction::tests::a_scan_does_not_flush_the_hot_set
    eviction::tests::admission_memory_is_counted_and_follows_the_items
    eviction::tests::compaction_in_windows_gives_what_one_pass_gives
    eviction::tests::drop_counts_take_only_room_the_merge_scratch_cannot_use
    eviction::tests::every_policy_but_none_keeps_serving_past_a_full_heap
    eviction::tests::merge_keeps_read_items_and_drops_unread_ones
    eviction::tests::merge_scratch_is_fixed_at_build_and_counted
    eviction::tests::merges_while_the_table_drains_move_the_right_entries
    eviction::tests::overwrites_within_the_heap_are_compacted_not_evicted
    eviction::tests::small_compaction_packs_thirty_day_items_only_within_its_spread
    external::tests::refusals_change_nothing_and_keep_ownership
    external::tests::withheld_segments_give_their_pages_back
    hashtable::tests::frequency_saturates
    hashtable::tests::full_windows_borrow_free_slots_from_far_away
    hashtable::tests::grows_when_windows_fill_and_drains_incrementally
    hashtable::tests::key_hash_bits_are_balanced
    hashtable::tests::table_matches_a_hashmap_model
    item::tests::key_compare_agrees_with_slice_equality_and_sizes_the_item
    memory::tests::file_heap_keeps_its_bytes_across_maps
    memory::tests::populate_makes_every_page_resident_and_keeps_the_bytes
    model_tests::counters_match_a_recount_after_every_write_and_delete
    model_tests::counters_match_a_recount_under_eviction_and_growth
    model_tests::matches_model_while_the_table_grows
    model_tests::matches_model_without_eviction
    model_tests::never_wrong_under_eviction
    model_tests::never_wrong_when_merges_join_deadlines
    model_tests::never_wrong_while_growing_under_eviction
    model_tests::the_fuzz_entry_point_agrees_with_the_model_on_random_inputs
    sharded::tests::cas_tokens_name_one_item_version_across_all_shards
    sharded::tests::every_keyed_op_agrees_with_one_unsharded_cache
    sharded::tests::keys_spread_evenly_and_every_shard_fills
    sharded::tests::threads_hammering_one_cache_read_their_own_writes
    storage::tests::a_panic_while_a_client_holds_the_cache_stops_the_service
    storage::tests::the_storage_thread_sleeps_after_a_burst
    ttl::tests::buckets_cover_the_range_without_gaps
    ttl::tests::spread_follows_the_precision_bound
)
args=()
for t in "${SKIP[@]}"; do args+=(--skip "$t"); done
# Isolation off: the clock tests read the real clock. Permissive
# provenance: the huge-page advice takes an address as an integer (a
# no-op under Miri, see memory.rs).
PROPTEST_CASES=1 MIRIFLAGS="-Zmiri-disable-isolation -Zmiri-permissive-provenance" \
    cargo +nightly miri test -p seg-cache --lib -- --test-threads=1 --exact "${args[@]}"
