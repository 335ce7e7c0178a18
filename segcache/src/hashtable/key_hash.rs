//! The one key hash of the crate, with fixed seeds so runs are repeatable:
//! aHash's portable algorithm (`ahash::RandomState::with_seeds` with
//! [`SEEDS`], then `write(key)` and `finish()`, where aHash has no AES
//! hardware to use), written out for one byte string so that a key of 17
//! to 32 bytes, the common size, is two rounds with no loop to test; the
//! test `key_hash_is_ahash_fallback` checks it against the crate.
//! Homes use the low 32 bits, sharding [`SHARD_SHIFT`](super::SHARD_SHIFT) and up (10 bits),
//! the check bits 51..56 and the tag the top byte. (Not every seed set is
//! sound: one tried earlier hashed every key to 0; the test
//! `key_hash_bits_are_balanced` guards these.)

/// The seeds, as given to `ahash::RandomState::with_seeds`.
pub(super) const SEEDS: [u64; 4] = [
    0x243f_6a88_85a3_08d3,
    0x1319_8a2e_0370_7344,
    0xa409_3822_299f_31d0,
    0x082e_fa98_ec4e_6c89,
];
/// What aHash mixes each seed with (its `PI2`).
const SEED_MASKS: [u64; 4] = [
    0x4528_21e6_38d0_1377,
    0xbe54_66cf_34e9_0c6c,
    0xc0ac_29b7_c97c_50dd,
    0x3f84_d5b5_b547_0917,
];
/// aHash's multiplier for the length and its rotation per block.
const MULTIPLE: u64 = 6_364_136_223_846_793_005;
const ROT: u32 = 23;
/// The hasher's starting state, its pad and its two block keys.
const START: u64 = SEEDS[1] ^ SEED_MASKS[1];
const PAD: u64 = SEEDS[0] ^ SEED_MASKS[0];
const KEYS: [u64; 2] = [SEEDS[2] ^ SEED_MASKS[2], SEEDS[3] ^ SEED_MASKS[3]];

/// The full 128-bit product of `a` and `b`, its halves xored.
#[inline(always)]
fn folded_multiply(a: u64, b: u64) -> u64 {
    let product = a as u128 * b as u128;
    product as u64 ^ (product >> 64) as u64
}

/// One 16-byte block (as two words) into the state.
#[inline(always)]
fn mix(state: u64, lo: u64, hi: u64) -> u64 {
    let combined = folded_multiply(lo ^ KEYS[0], hi ^ KEYS[1]);
    (state.wrapping_add(PAD) ^ combined).rotate_left(ROT)
}

/// Hashes `key` (always inline: the call would cost more than the
/// two rounds of a common key).
#[inline(always)]
pub(crate) fn hash_key(key: &[u8]) -> u64 {
    let n = key.len();
    let word = |at: usize| u64::from_ne_bytes(key[at..at + 8].try_into().unwrap());
    let half = |at: usize| u32::from_ne_bytes(key[at..at + 4].try_into().unwrap()) as u64;
    let mut state = START.wrapping_add(n as u64).wrapping_mul(MULTIPLE);
    if n > 16 {
        // The last 16 bytes, then every 16 from the front while more
        // than 16 are left (one block up to 32 bytes).
        state = mix(state, word(n - 16), word(n - 8));
        state = mix(state, word(0), word(8));
        let mut at = 16;
        while n - at > 16 {
            state = mix(state, word(at), word(at + 8));
            at += 16;
        }
    } else if n > 8 {
        state = mix(state, word(0), word(n - 8));
    } else if n >= 4 {
        state = mix(state, half(0), half(n - 4));
    } else if n >= 2 {
        let first = u16::from_ne_bytes([key[0], key[1]]) as u64;
        state = mix(state, first, key[n - 1] as u64);
    } else if n == 1 {
        state = mix(state, key[0] as u64, key[0] as u64);
    } else {
        state = mix(state, 0, 0);
    }
    folded_multiply(state, PAD).rotate_left((state & 63) as u32)
}
