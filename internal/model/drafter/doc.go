// Package drafter implements ReDrafter speculative decoding ("Recurrent
// Drafter for Fast Speculative Decoding in Large Language Models", Cheng et
// al., arXiv 2403.09919): a recurrent draft head proposes W beams of L
// tokens, the LLM verifies all of them in one forward pass over a prefix
// tree, and an acceptance rule keeps the longest valid path.
//
// This package holds the host-side algorithms of one step:
//
//   - tree building (BuildTree, TreeBuilder): sort the beams, merge shared
//     prefixes, pack the N distinct tokens in DFS pre-order, and describe
//     them the way graph.Attention wants (subtree ends End, depths for the
//     positions) plus the Unpacker from beams to packed tokens;
//   - acceptance: AcceptGreedy (exactly greedy decoding), AcceptSample
//     (exact speculative sampling over the tree, the default for T > 0) and
//     AcceptApple (the reference implementation's rule, which is not
//     distribution-preserving; for parity only);
//   - Stats, the decode loop's ledger (tokens per step, compression, timings).
//
// The draft head itself (the RNN and MLP over the LLM's final hidden state),
// its beam search and distillation training live elsewhere and build on the
// runtime graph; this package imports no backend.
//
// Conventions follow the reference implementation (apple/ml-recurrent-drafter):
// L counts the init token (the token the LLM already chose, shared by every
// beam at depth 0), so a beam drafts L-1 tokens and a step emits between 1 and
// L tokens.
package drafter
