"""The shared domain model of hami-place: HAMi's view of nodes, GPUs, pods and placements.

Both the kubectl plugin (kubectl_hami_place) and the in-cluster agent import from here; this
package imports from neither. HAMi annotations are parsed in this package and nowhere else.
"""

__version__ = "0.1.0"
