// Redrafter: an idiomatic Swift layer over libredrafter's C API (redrafter.h).
//
//     let engine = try Engine(model: "stories260K.gguf", drafter: "drafter")
//     for try await piece in engine.generate("Once upon a time") { print(piece, terminator: "") }
//
// Cancelling the Task that iterates a stream cancels the generation (through
// rd_session_cancel) before its next decoding step.
//
// UNTESTED: written without a Swift compiler; see docs/EMBEDDING.md for what
// a Mac user should run and report.
import CRedrafter
import Foundation

/// An error from libredrafter: its status code (RD_ERR_*) and message.
public struct RedrafterError: Error, CustomStringConvertible {
    public let status: Int32
    public let message: String
    public var description: String { message }
}

/// Runs a C call that takes `char **err` last and throws its failure.
private func check(_ call: (UnsafeMutablePointer<UnsafeMutablePointer<CChar>?>) -> rd_status) throws {
    var err: UnsafeMutablePointer<CChar>? = nil
    let status = call(&err)
    guard status == RD_OK else {
        let message = err.map { String(cString: $0) } ?? "redrafter: status \(status)"
        rd_free(err)
        throw RedrafterError(status: status, message: message)
    }
}

/// Calls body with a C string for s, or NULL for nil.
private func withOptionalCString<R>(_ s: String?, _ body: (UnsafePointer<CChar>?) throws -> R) rethrows -> R {
    guard let s else { return try body(nil) }
    return try s.withCString { try body($0) }
}

/// Options of one generation (rd_generate_options).
public struct GenerateOptions: Sendable {
    public var maxTokens: Int = 256
    public var temperature: Float = 0  // 0: greedy
    public var topK: Int = 0
    public var topP: Float = 1
    public var seed: UInt64 = 0
    public var useDrafter: Bool = true
    public init() {}
}

/// One chat turn; role is "system", "user" or "assistant".
public struct Message: Sendable {
    public var role: String
    public var content: String
    public init(role: String, content: String) { self.role = role; self.content = content }
}

/// A loaded model (and draft head). Safe to share between tasks; each
/// generation runs in a Session of its own.
public final class Engine: @unchecked Sendable {
    let handle: rd_engine

    /// Loads a model (.gguf or an HF checkpoint directory) and, if given, a
    /// ReDrafter draft head directory. backend: nil ("auto": the GPU on Apple
    /// Silicon), "cpu" or "metal".
    public init(model: String, drafter: String? = nil, backend: String? = nil, context: Int = 0) throws {
        var opts = rd_load_options()
        try check { rd_load_options_init(&opts, $0) }
        opts.context = Int32(context)
        var h: rd_engine = 0
        try model.withCString { modelPath in
            try withOptionalCString(drafter) { drafterPath in
                try withOptionalCString(backend) { backendName in
                    opts.drafter = drafterPath
                    opts.backend = backendName
                    try check { rd_engine_load(modelPath, &opts, &h, $0) }
                }
            }
        }
        handle = h
    }

    deinit {
        // Every Session holds its Engine, so none is left when this runs.
        rd_engine_free(handle, nil)
    }

    /// A new conversation with its own KV cache.
    public func session() throws -> Session { try Session(engine: self) }

    /// Streams a continuation of prompt from a fresh session.
    public func generate(_ prompt: String, options: GenerateOptions = GenerateOptions()) -> AsyncThrowingStream<String, Error> {
        do {
            return try session().generate(prompt, options: options)
        } catch {
            return AsyncThrowingStream { $0.finish(throwing: error) }
        }
    }
}

/// One conversation. Its generations must not overlap (a second one while
/// one streams fails with RD_ERR_BUSY); different Sessions may run at once.
public final class Session: @unchecked Sendable {
    let engine: Engine
    let handle: rd_session

    init(engine: Engine) throws {
        self.engine = engine
        var h: rd_session = 0
        try check { rd_session_new(engine.handle, &h, $0) }
        handle = h
    }

    deinit { rd_session_free(handle, nil) }

    /// Streams the continuation of prompt.
    public func generate(_ prompt: String, options: GenerateOptions = GenerateOptions()) -> AsyncThrowingStream<String, Error> {
        stream(options) { opts, callback, user, err in
            prompt.withCString { rd_session_generate(self.handle, $0, opts, callback, user, nil, err) }
        }
    }

    /// Streams the assistant's reply to the whole conversation so far,
    /// rendered with a chat template (nil: the model's own, else vicuna).
    public func chat(_ messages: [Message], template: String? = nil, options: GenerateOptions = GenerateOptions()) -> AsyncThrowingStream<String, Error> {
        stream(options) { opts, callback, user, err in
            // C copies of the strings, alive for the whole call.
            let roles = messages.map { strdup($0.role) }
            let contents = messages.map { strdup($0.content) }
            defer { (roles + contents).forEach { free($0) } }
            let cmsgs = zip(roles, contents).map { rd_message(role: UnsafePointer($0), content: UnsafePointer($1)) }
            return withOptionalCString(template) { tmpl in
                cmsgs.withUnsafeBufferPointer {
                    rd_session_chat(self.handle, $0.baseAddress, $0.count, tmpl, opts, callback, user, nil, err)
                }
            }
        }
    }

    /// Boxes a stream's continuation for the C callback.
    private final class Sink {
        let continuation: AsyncThrowingStream<String, Error>.Continuation
        init(_ c: AsyncThrowingStream<String, Error>.Continuation) { continuation = c }
    }

    /// Runs a blocking generation on a thread of its own and streams its
    /// pieces; the stream's termination (the consuming Task cancelled, or
    /// the loop left early) cancels the generation.
    private func stream(_ options: GenerateOptions,
                        _ run: @escaping (UnsafePointer<rd_generate_options>, rd_token_callback, UnsafeMutableRawPointer,
                                          UnsafeMutablePointer<UnsafeMutablePointer<CChar>?>) -> rd_status)
        -> AsyncThrowingStream<String, Error> {
        AsyncThrowingStream { continuation in
            let handle = self.handle
            continuation.onTermination = { _ in rd_session_cancel(handle, nil) }
            let sink = Sink(continuation)
            Thread {
                var opts = rd_generate_options()
                rd_generate_options_init(&opts, nil)
                opts.max_tokens = Int32(options.maxTokens)
                opts.temperature = options.temperature
                opts.top_k = Int32(options.topK)
                opts.top_p = options.topP
                opts.seed = options.seed
                opts.no_draft = options.useDrafter ? 0 : 1
                let user = Unmanaged.passRetained(sink).toOpaque()
                defer { Unmanaged<Sink>.fromOpaque(user).release() }
                let callback: rd_token_callback = { piece, length, user in
                    guard let piece, let user else { return 1 }
                    let sink = Unmanaged<Sink>.fromOpaque(user).takeUnretainedValue()
                    let bytes = UnsafeRawBufferPointer(start: piece, count: length)
                    if case .terminated = sink.continuation.yield(String(decoding: bytes, as: UTF8.self)) {
                        return 1 // nobody is listening any more
                    }
                    return 0
                }
                do {
                    try withExtendedLifetime(self) {
                        try check { err in run(&opts, callback, user, err) }
                    }
                    continuation.finish()
                } catch {
                    continuation.finish(throwing: error)
                }
            }.start()
        }
    }
}
