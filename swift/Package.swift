// swift-tools-version:5.9
// The Swift package of redrafter: the Redrafter module over libredrafter's C
// API (redrafter.h), and RedrafterChat, a minimal SwiftUI chat app.
//
// UNTESTED: no Swift compiler was available where this was written. Build
// CRedrafter.xcframework first (./build-xcframework.sh, on a Mac, from this
// folder); see README.md and docs/EMBEDDING.md.
import PackageDescription

let package = Package(
    name: "Redrafter",
    platforms: [.macOS(.v13)],
    products: [
        .library(name: "Redrafter", targets: ["Redrafter"]),
        .executable(name: "RedrafterChat", targets: ["RedrafterChat"]),
    ],
    targets: [
        // libredrafter.a for arm64 + x86_64 with redrafter.h and a module map
        // (module CRedrafter), made by build-xcframework.sh.
        .binaryTarget(name: "CRedrafter", path: "CRedrafter.xcframework"),
        .target(
            name: "Redrafter",
            dependencies: ["CRedrafter"],
            linkerSettings: [
                // What the Go runtime in the static archive links against.
                .linkedLibrary("resolv"),
                .linkedFramework("CoreFoundation"),
            ]
        ),
        .executableTarget(name: "RedrafterChat", dependencies: ["Redrafter"]),
    ]
)
