// RedrafterChat: a minimal SwiftUI chat over the Redrafter module.
//
//     swift run RedrafterChat /path/to/model.gguf [/path/to/drafter]
//
// Each turn sends the whole conversation to one Session, whose KV cache keeps
// what the earlier turns computed. Stop cancels the Task, which cancels the
// generation. UNTESTED: see README.md.
import Redrafter
import SwiftUI

@MainActor
final class ChatModel: ObservableObject {
    @Published var messages: [Message] = []
    @Published var status = ""
    @Published var replying = false
    private var session: Session?
    private var task: Task<Void, Never>?

    init() {
        let args = CommandLine.arguments
        guard args.count >= 2 else {
            status = "usage: RedrafterChat MODEL [DRAFTER]"
            return
        }
        do {
            let engine = try Engine(model: args[1], drafter: args.count > 2 ? args[2] : nil)
            session = try engine.session()
            status = "loaded \(args[1])"
        } catch {
            status = "\(error)"
        }
    }

    func send(_ text: String) {
        guard let session, !text.isEmpty, !replying else { return }
        messages.append(Message(role: "user", content: text))
        messages.append(Message(role: "assistant", content: ""))
        let conversation = Array(messages.dropLast())
        replying = true
        task = Task {
            do {
                for try await piece in session.chat(conversation) {
                    messages[messages.count - 1].content += piece
                }
            } catch {
                status = "\(error)"
            }
            replying = false
        }
    }

    func stop() { task?.cancel() }
}

struct ContentView: View {
    @StateObject private var chat = ChatModel()
    @State private var draft = ""

    var body: some View {
        VStack(alignment: .leading) {
            ScrollView {
                VStack(alignment: .leading, spacing: 8) {
                    ForEach(Array(chat.messages.enumerated()), id: \.offset) { _, m in
                        Text(m.content.isEmpty ? "…" : m.content)
                            .padding(8)
                            .background(m.role == "user" ? Color.blue.opacity(0.15) : Color.gray.opacity(0.15))
                            .cornerRadius(8)
                            .frame(maxWidth: .infinity, alignment: m.role == "user" ? .trailing : .leading)
                    }
                }
            }
            HStack {
                TextField("Message", text: $draft)
                    .onSubmit { chat.send(draft); draft = "" }
                if chat.replying {
                    Button("Stop") { chat.stop() }
                } else {
                    Button("Send") { chat.send(draft); draft = "" }
                }
            }
            Text(chat.status).font(.caption).foregroundColor(.secondary)
        }
        .padding()
        .frame(minWidth: 480, minHeight: 360)
    }
}

@main
struct RedrafterChatApp: App {
    var body: some Scene {
        WindowGroup("Redrafter") { ContentView() }
    }
}
