// Package hub pulls models and draft heads from the Hugging Face Hub (or a
// mirror) into the hub's own cache, finds them there, lists and removes
// them.
//
// The cache is the one huggingface_hub, transformers and mlx-lm share
// ("Manage huggingface_hub cache-system" in the huggingface_hub docs), so a
// model any of them downloaded is found here without downloading, and one
// pulled here is found by them:
//
//	<cache>/models--owner--name/
//	    blobs/<etag>                 the files' bytes, named by the hub's ETag: the
//	                                 SHA-256 of an LFS file, the git blob SHA-1 of another
//	    snapshots/<commit>/<path>    relative symlinks to ../../blobs/<etag>
//	    refs/<branch>                the commit the branch pointed at when last pulled
//	<cache>/.locks/models--owner--name/<etag>.lock
//
// A download goes to blobs/<etag>.incomplete (huggingface_hub's name too,
// so either client resumes the other's), continues after an interruption
// with an HTTP range, is checked against the ETag (SHA-256 or git SHA-1)
// and only then renamed to its blob and linked into the snapshot; the ref
// is written after every file of the pull is in place. A pull that fails or
// is stopped therefore leaves nothing half written under snapshots/, which
// is where models are read from. Two pulls of one file take turns on the
// lock file (flock, as huggingface_hub's filelock does on Unix).
//
// The package reads no environment: the caller passes the cache directory,
// endpoint, token and offline switch (the CLI reads HF_HUB_CACHE, HF_HOME,
// HF_ENDPOINT, HF_TOKEN and HF_HUB_OFFLINE through internal/envvar).
//
// Why our own client: the module proxy serves github.com/gomlx/go-huggingface
// (v0.3.1 read), whose hub package does not do what a pull needs. Its
// downloader truncates the temporary file and sends no Range, so an
// interrupted download starts over; it verifies no checksum; on a read error
// it wraps a nil error (errors.Wrapf(err, ...) with err nil), so a connection
// cut half way returns success and the truncated file is placed as the blob;
// its default cache directory ignores HF_HUB_CACHE and HF_HOME; it has no
// offline mode and no disk-space check; it generates a UUID and may panic in
// init, logs with the log package, and brings testify, uuid, pkg/errors and
// protobuf with it. The protocol subset a pull needs is small (three GET/HEAD
// endpoints), so this package speaks it with net/http alone.
package hub
