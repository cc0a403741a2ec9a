// Package kubernetes holds lockhttp's Kubernetes manifests (plain YAML with a kustomization);
// its tests read them as the API server would, strictly, and hold them to what the deployment
// promises: no root, no capability, the agents' way out the gate alone, no egress for the signer.
package kubernetes
